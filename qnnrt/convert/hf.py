"""A Hugging Face model folder: config.json (its "architectures" picks the registry entry), one
model.safetensors or several shards with model.safetensors.index.json, tokenizer.json, the chat
template (tokenizer_config.json or chat_template.jinja) and generation_config.json."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qnnrt.convert import arch as registry
from qnnrt.convert.spec import CheckedWeights, ConvertError, ModelSpec
from qnnrt.formats.safetensors_file import SafetensorsFile


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConvertError(f"{path}: cannot read ({e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: a JSON object is needed")
    return data


class HfTensors:
    """Canonical weights from the folder's safetensors files (memory-mapped), transposed to [in, out]
    where the checkpoint stores [out, in]."""

    def __init__(self, folder: Path) -> None:
        index = folder / "model.safetensors.index.json"
        single = folder / "model.safetensors"
        files: dict[str, SafetensorsFile] = {}
        self.where_of: dict[str, SafetensorsFile] = {}
        if index.is_file():
            wmap = read_json(index).get("weight_map")
            if not isinstance(wmap, dict) or not wmap:
                raise ConvertError(f"{index}: weight_map is missing or empty")
            for name, fname in wmap.items():
                path = folder / str(fname)
                if not path.is_file():
                    raise ConvertError(f"{index}: tensor {name!r} is in {fname}, which is not in {folder}")
                if fname not in files:
                    files[fname] = SafetensorsFile(path, ConvertError)
                if name not in files[fname].entries:
                    raise ConvertError(f"{index}: names {fname} for tensor {name!r}, but that file lacks it")
                self.where_of[name] = files[fname]
        elif single.is_file():
            f = SafetensorsFile(single, ConvertError)
            self.where_of = {name: f for name in f.entries}
        else:
            found = sorted(p.name for p in folder.glob("*.safetensors"))
            raise ConvertError(f"{folder}: no model.safetensors or model.safetensors.index.json"
                               + (f" (found {found}: add the index file)" if found else
                                  "; qnnrt convert reads safetensors weights (not .bin / .pt)"))
        self.folder = folder

    def where(self, canonical: str) -> str:
        name, _ = registry.hf_name(canonical)
        f = self.where_of.get(name)
        return f"{f.path if f else self.folder}: tensor {name!r}"

    def get(self, canonical: str) -> np.ndarray:
        name, transposed = registry.hf_name(canonical)
        f = self.where_of.get(name)
        if f is None:
            raise ConvertError(f"{self.folder}: tensor {name!r} ({canonical}) is missing from the "
                               f"checkpoint; the model is incomplete or not of the architecture its "
                               f"config.json names")
        w = f.float32(name)
        return np.ascontiguousarray(w.T) if transposed else w


@dataclass(frozen=True)
class TokenizerFiles:
    """What the bundle's tokenizer is made of: tokenizer.json (its text), the chat template, the
    special tokens' text (bos / eos) and generation_config.json's sampler."""
    tokenizer_json: str | None
    chat_template: str | None
    tokenizer_config: dict
    generation: dict


def tokenizer_files(folder: Path) -> TokenizerFiles:
    tok = folder / "tokenizer.json"
    tcfg = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    template = tcfg.get("chat_template")
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    if isinstance(template, list):      # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    gen = read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
    return TokenizerFiles(tok.read_text(encoding="utf-8") if tok.is_file() else None,
                          template if isinstance(template, str) else None, tcfg, gen)


def read_hf(folder: Path) -> tuple[ModelSpec, CheckedWeights, TokenizerFiles]:
    """The folder's spec, its checked weights and its tokenizer files."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ConvertError(f"{folder}: no config.json; give a Hugging Face model folder or a .gguf file")
    cfg = read_json(cfg_path)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ConvertError(f"{cfg_path}: 'architectures' is {archs!r}; a list naming the model class is needed")
    a = registry.by_hf_class(archs[0], str(cfg_path))
    spec = a.spec(cfg, str(cfg_path))
    gen = tokenizer_files(folder)
    eos = gen.generation.get("eos_token_id")
    if eos is not None:
        from qnnrt.convert.arch.common import _ids
        spec = _replace_eos(spec, _ids(eos, str(folder / "generation_config.json"), "eos_token_id", spec.vocab))
    tensors = HfTensors(folder)
    return spec, CheckedWeights(spec, tensors, tensors.where), gen


def _replace_eos(spec: ModelSpec, eos: tuple[int, ...]) -> ModelSpec:
    import dataclasses
    merged = tuple(dict.fromkeys(spec.eos + eos))
    return dataclasses.replace(spec, eos=merged)
