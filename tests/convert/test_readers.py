"""Reading what users bring (no compile): Hugging Face folders (sharded, bf16), GGUF (quantized,
Q/K permuted), the architectures' specs, the numpy reference, the part graphs on the CPU, and a clear
one-line error for every bad input."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from qnnrt.convert import ConvertError, ConvertOptions, open_model
from qnnrt.formats.safetensors_file import save_safetensors
from tests.helpers.cli_helpers import qnnrt


def test_the_committed_references_are_the_numpy_model_on_the_makers_weights(models, references, maker) -> None:
    """The maker's models, read by the converter, give the committed reference tokens."""
    assert references["models"] == maker.references(models)


def test_specs_of_each_architecture(models) -> None:
    llama, qwen2, qwen3 = (open_model(models[n]).spec for n in ("llama", "qwen2", "qwen3"))
    assert not llama.tied and llama.rope_scaling is not None and llama.rope_scaling.factor == 8.0
    assert qwen2.tied and qwen2.qkv_bias and not qwen2.qk_norm and qwen2.rope_theta == 1e6
    assert qwen3.qk_norm and qwen3.head_dim == 24 and qwen3.hidden // qwen3.heads == 16


@pytest.mark.parametrize("factor, theta, original", [(8.0, 500000.0, 8192), (32.0, 500000.0, 8192),
                                                      (8.0, 10000.0, 64), (16.0, 1e6, 4096)])
def test_llama3_scaling_is_read_back_from_llama_cpp_rope_freqs(models, maker, factor, theta, original) -> None:
    """Llama 3.x GGUFs carry the scaling only as rope_freqs.weight: Llama 3.1 / 3.2's settings and
    others are recovered exactly (the file's own GGUF is the third case, end to end)."""
    from qnnrt.convert.gguf_file import llama3_from_rope_freqs
    cfg = {**maker.CONFIGS["llama"], "hidden_size": 2048, "num_attention_heads": 32, "rope_theta": theta,
           "rope_scaling": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": original}}
    spec = dataclasses.replace(open_model(models["llama"]).spec, head_dim=64, rope_theta=theta, rope_scaling=None)
    got = llama3_from_rope_freqs(maker.rope_freqs(cfg).astype(np.float64), spec, "f.gguf: tensor 'rope_freqs.weight'")
    assert (got.factor, got.low_freq_factor, got.high_freq_factor, got.original_max_positions) == (
        factor, 1.0, 4.0, original)


def test_rope_freqs_that_are_not_llama3_or_disagree_with_the_metadata_are_refused(models, maker) -> None:
    from qnnrt.convert.gguf_file import llama3_from_rope_freqs
    spec = open_model(models["gguf"]).spec
    good = maker.rope_freqs(maker.CONFIGS["llama"]).astype(np.float64)
    where = "f.gguf: tensor 'rope_freqs.weight'"
    with pytest.raises(ConvertError, match=r"^f.gguf: tensor 'rope_freqs.weight': the factors .* are not Llama 3's"):
        llama3_from_rope_freqs(good[::-1].copy(), dataclasses.replace(spec, rope_scaling=None), where)
    other = dataclasses.replace(spec.rope_scaling, factor=4.0)
    with pytest.raises(ConvertError, match="are not the file's rope.scaling metadata"):
        llama3_from_rope_freqs(good, dataclasses.replace(spec, rope_scaling=other), where)
    with pytest.raises(ConvertError, match=r"3 values; 8 positive factors \(head_dim / 2\) are needed"):
        llama3_from_rope_freqs(good[:3], spec, where)


@pytest.mark.parametrize("pre, pieces", [
    ("gpt-2", ["12345", "Ġdon", "'t"]), ("smollm", ["1", "2", "3", "4", "5"]),
    ("llama-bpe", ["123", "45", "Ġdon", "'t"]), ("qwen2", ["1", "2", "3", "4", "5"])])
def test_a_gguf_tokenizer_splits_as_llama_cpp_does_for_its_pre_tokenizer(models, pre, pieces) -> None:
    """What llama.cpp's test vectors check in full (tools/check_gguf_tokenizers.py: gpt-2, llama-bpe,
    qwen2, starcoder, refact equal on every input); here each family's split of digits and a contraction."""
    from tokenizers import Tokenizer

    from qnnrt.convert.gguf_file import read_metadata, tokenizer_json
    meta = {**read_metadata(models["gguf"]), "tokenizer.ggml.pre": pre}
    split = [p for p, _ in Tokenizer.from_str(tokenizer_json(meta, models["gguf"])).pre_tokenizer
             .pre_tokenize_str("12345 don't")]
    assert split[:len(pieces)] == pieces


def _spm_gguf(path: Path) -> Path:
    """A vocabulary-only GGUF with a SentencePiece vocabulary (tokenizer.ggml.model 'llama')."""
    import gguf
    pieces = {"\u2581": -1.0, "a": -2.0, "b": -3.0, "c": -4.0, "ab": -10.0, "bc": -5.0, "\u2581a": -20.0, "abc": -6.0}
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + list(pieces)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + list(pieces.values()))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(pieces))
    w.add_bos_token_id(1)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_sentencepiece_gguf_tokenizer_merges_by_score_with_byte_fallback(tmp_path) -> None:
    """What llama.cpp's test vectors check in full (tools/check_gguf_tokenizers.py: llama-spm and phi-3
    equal on every input): ' abc' is '▁' 'abc' (bc scores above ab, then abc above ▁a), not '▁a' 'bc' as
    a left-to-right pass would give; an unknown 'é' is its two UTF-8 bytes; BOS in front; decoded back."""
    from tokenizers import Tokenizer

    from qnnrt.convert.gguf_file import read_metadata, tokenizer_json
    path = _spm_gguf(tmp_path / "spm.gguf")
    tok = Tokenizer.from_str(tokenizer_json(read_metadata(path), path))
    ids = tok.encode("abc\u00e9").ids
    assert ids == [1, 259, 266, 3 + 0xC3, 3 + 0xA9]
    assert tok.decode(ids) == "abc\u00e9"


def test_a_gguf_pre_tokenizer_qnnrt_does_not_rebuild_is_refused(models) -> None:
    from qnnrt.convert.gguf_file import read_metadata, tokenizer_json
    meta = {**read_metadata(models["gguf"]), "tokenizer.ggml.pre": "deepseek-llm"}
    with pytest.raises(ConvertError, match=r"tokenizer.ggml.pre is 'deepseek-llm'; .*pass tokenizer=\.\.\. "
                                           r"\(--tokenizer\)"):
        tokenizer_json(meta, models["gguf"])


def test_bf16_weights_are_widened_bit_exactly(models, maker) -> None:
    cfg = maker.CONFIGS["qwen2"]
    w = maker.hf_weights("qwen2", cfg)["model.layers.1.self_attn.q_proj.weight"]
    truncated = ((w.view(np.uint32) >> 16) << 16).view(np.float32)
    assert np.array_equal(open_model(models["qwen2"]).weights["l1.wq"], truncated.T)


def test_gguf_is_the_hf_model_with_qk_unpermuted_and_q8_0_dequantized(models) -> None:
    hf, gg = open_model(models["llama"]), open_model(models["gguf"])
    assert gg.kind == "gguf" and gg.spec.rope_scaling == hf.spec.rope_scaling
    for name in hf.spec.shapes():
        a, b = hf.weights[name], gg.weights[name]
        if name.split(".")[-1] in ("wg", "wu", "wd"):       # Q8_0: within half a step of each block's scale
            assert np.abs(a - b).max() <= np.abs(a).max() / 127 * 0.51 + 1e-6, name
        else:                                               # F32, Q/K un-permuted: exact
            assert np.array_equal(a, b), name
    assert json.loads(gg.tokenizer.tokenizer_json)["model"]["vocab"] == \
        json.loads(hf.tokenizer.tokenizer_json)["model"]["vocab"]


def test_part_graphs_on_the_cpu_give_the_reference_tokens(models, references) -> None:
    """qwen3 (q/k norm, own head_dim) in 2 parts, run as Genie runs them on ONNX Runtime's CPU EP."""
    from qnnrt.convert import drive, graphs
    src = open_model(models["qwen3"])
    plan = graphs.PartPlan(64, graphs.split_layers(src.spec.layers, 2))
    call = drive.cpu_caller(lambda p, ar: graphs.part_model(src.spec, plan, src.weights, ar, p).SerializeToString())
    r = references["models"]["qwen3"][1]
    got = drive.run_parts(src.spec, plan, call, r["prompt_ids"], len(r["tokens"]), 8)
    assert got == r["tokens"]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(folder: Path, **changes) -> None:
    p = folder / "config.json"
    cfg = json.loads(p.read_text())
    cfg.update(changes)
    p.write_text(json.dumps(cfg))


def test_an_unsupported_architecture_is_refused_naming_it_and_the_supported(models, tmp_path) -> None:
    m = _copy(models["qwen2"], tmp_path / "m")
    _edit_config(m, architectures=["MistralForCausalLM"])
    with pytest.raises(ConvertError, match=r"'MistralForCausalLM' is not supported; qnnrt convert supports "
                                           r"LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"):
        open_model(m)


@pytest.mark.parametrize("change, message", [
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, r"rope_scaling type 'yarn' is not supported"),
    ({"hidden_size": 96},
     r"tensor 'model.embed_tokens.weight' has shape \[320, 64\]; the config .* implies \[320, 96\]"),
    ({"num_attention_heads": 3}, r"num_attention_heads 3 is not a multiple of num_key_value_heads 2"),
])
def test_bad_configs_name_the_file_and_the_key(models, tmp_path, change, message) -> None:
    m = _copy(models["qwen2"], tmp_path / "m")
    _edit_config(m, **change)
    with pytest.raises(ConvertError, match=message):
        src = open_model(m)
        src.weights["embed"]


def test_a_missing_tensor_names_the_checkpoint_tensor(models, tmp_path, maker) -> None:
    m = _copy(models["qwen3"], tmp_path / "m")
    w = maker.hf_weights("qwen3", maker.CONFIGS["qwen3"])
    del w["model.layers.2.self_attn.k_norm.weight"]
    save_safetensors(m / "model.safetensors", w)
    with pytest.raises(ConvertError, match=r"tensor 'model.layers.2.self_attn.k_norm.weight' \(l2.k_norm\) is missing"):
        open_model(m).weights["l2.k_norm"]


def test_a_truncated_safetensors_shard_is_named(models, tmp_path) -> None:
    m = _copy(models["llama"], tmp_path / "m")
    shard = m / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(ConvertError, match=r"model-00002-of-00002.safetensors: tensor '.*': data offsets .* "
                                           r"truncated or damaged"):
        open_model(m)


def test_a_corrupt_gguf_and_a_context_past_the_model_are_one_line_cli_errors(models, tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(models["gguf"].read_bytes()[:3000])
    r = qnnrt("convert", bad, "-o", tmp_path / "out")
    assert r.returncode == 1 and "bad.gguf: not a readable GGUF file" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    r = qnnrt("convert", models["qwen3"], "-o", tmp_path / "out", "--context", "4096")
    assert r.returncode == 1 and "--context 4096 is past the model's max_position_embeddings 256" in r.stderr
    with pytest.raises(ConvertError, match="--precision 'w2a16': choose one of fp16, w8a16, w4a16"):
        ConvertOptions(precision="w2a16")
