"""`qnnrt inspect BUNDLE` (a Genie bundle folder): the config's dialog, sampler, RoPE and backend
extensions, the variants found from the graphs' shapes (each part's graph and binary), each
variant's I/O, the LLM layout qnnrt runs it with (or why it cannot), and each part binary (SoC,
size, weight sharing). Reads binary info only: no context is created."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from qnnrt.errors import QnnrtError


def _jsonable(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def describe_genie(path: Path, backend_lib: str | None = None) -> dict[str, Any]:
    from qnnrt.formats.genie import read_genie_config
    from qnnrt.formats.lora import read_slots
    from qnnrt.llm.genie_layout import genie_layout, genie_notes
    from qnnrt.llm.runner import io_tensor, lora_input_names
    from qnnrt.loader import open_for_planning
    from qnnrt.runtime.graph_chain import GraphChainMethod
    from qnnrt.runtime.genie import context_lengths, graph_window
    config = read_genie_config(path)
    binaries, methods, soc_model, owned, _ = open_for_planning(path, backend_lib)
    try:
        out: dict[str, Any] = {"path": str(path), "kind": "genie", "soc_model": soc_model,
                               "config": {k: _jsonable(getattr(config, k))
                                          for k in ("context", "sampler", "tokenizer", "rope", "backend")},
                               "variants": [], "binaries": []}
        slots = read_slots(Path(config.config_path).parent)
        if slots is not None:
            out["lora"] = slots.to_record()
        for name, m in methods.items():
            assert isinstance(m, GraphChainMethod)
            w = graph_window(m.refs[0].spec, m.refs[0].key)
            out["variants"].append({
                "name": name, "ar": w.ar,
                "parts": [{"graph": r.spec.name, "binary": r.key} for r in m.refs],
                "inputs": [s.to_dict() for s in m.inputs], "outputs": [s.to_dict() for s in m.outputs]})
        try:
            lay = genie_layout(config, {n: ([io_tensor(s) for s in m.inputs], [io_tensor(s) for s in m.outputs])
                                        for n, m in methods.items()}, adapter_names=lora_input_names(config))
            out["llm"] = lay.describe()
            out["notes"] = genie_notes(config, lay.vocab_size)
        except QnnrtError as e:
            out["llm"] = {"error": str(e)}
            out["notes"] = []
        out["context_lengths"] = context_lengths(list(binaries), binaries)
        out["config"]["stop_sequences"] = list(config.stop_sequences)
        for key, b in binaries.items():
            out["binaries"].append({"key": key, "file_size": b.size, "soc_model": b.info.soc_model,
                                    "graphs": [g.name for g in b.graphs],
                                    "weight_sharing": bool(b.info.weight_sharing)})
        return out
    finally:
        for b in binaries.values():
            b.close()
        for o in owned:
            o.close()


def _shape(t: dict) -> str:
    return f"{t['dtype']}[{'x'.join(map(str, t['shape']))}]"


def print_genie(d: dict) -> None:
    c = d["config"]
    ctx, smp, rope, be = c["context"], c["sampler"], c["rope"], c["backend"]
    print(f"{d['path']}: Genie bundle, {len(d['binaries'])} context binaries, "
          f"{len(d['variants'])} variant(s), SoC model {d['soc_model'] or '?'}")
    print(f"  dialog: context {ctx['size']}, vocab {ctx['n_vocab']}, BOS {ctx['bos']}, EOS {list(ctx['eos'])}")
    pen = smp["penalty"]
    print(f"  sampler: temp {smp['temperature']}, top-k {smp['top_k']}, top-p {smp['top_p']}, seed {smp['seed']}"
          + (", greedy: true" if smp["greedy"] else "")
          + (f", token-penalty: last {pen['last_n']}, repetition {pen['repetition']:g}, presence "
             f"{pen['presence']:g}, frequency {pen['frequency']:g}" if pen else ""))
    stops = ", ".join(repr(x) for x in c["stop_sequences"])
    print(f"  stops: ids {sorted(set(ctx['eos']) | ({ctx['eot']} if ctx['eot'] is not None else set()))}"
          + (f", text {stops}" if stops else ""))
    print(f"  tokenizer: {c['tokenizer']}")
    if rope:
        sc = rope["scaling"]
        print(f"  RoPE: dim {rope['dim']}, theta {rope['theta']:g}"
              + (f", {sc['rope_type']} scaling x{sc['factor']:g}" if sc else ""))
    ext = be["extensions"]
    if ext:
        print(f"  backend extensions: SoC {ext['soc_model']}, {ext['dsp_arch']}, perf {ext['perf_profile']}, "
              f"shared buffer {'yes' if ext['shared_buffer'] else 'no'}, weight sharing "
              f"{'yes' if ext['weight_sharing'] else 'no'}")
    if len(d["context_lengths"]) > 1:
        print(f"  context lengths compiled: {d['context_lengths']}; qnnrt runs the smallest holding the "
              f"context size (Genie may switch between them)")
    for note in d["notes"]:
        print(f"  note: {note}")
    for v in d["variants"]:
        parts = ", ".join(f"{p['graph']} ({p['binary']})" for p in v["parts"])
        print(f"\n  method {v['name']} (AR {v['ar']}): {len(v['parts'])} part(s): {parts}")
        print("    in:  " + ", ".join(f"{t['name']} {_shape(t)}" for t in v["inputs"]))
        print("    out: " + ", ".join(f"{t['name']} {_shape(t)}" for t in v["outputs"]))
    llm = d["llm"]
    if "error" in llm:
        print(f"\n  LLM layout: cannot run as an LLM: {llm['error']}")
    else:
        print(f"\n  LLM layout: {llm['mode']}, {llm['n_layers']} layers, {llm['n_kv_heads']} KV heads x "
              f"{llm['head_dim']}, context {llm['context_len']}, prompt window {llm['prefill_ar_len']}, "
              f"caches {llm['cache_dtype']}, logits {llm['logits_dtype']}, mask {llm['mask_dtype']}, "
              f"positions {llm['positions']}")
    if "lora" in d:
        lo = d["lora"]
        print(f"  LoRA inputs: rank {lo['rank']} on {','.join(lo['targets'])} of {lo['layers']} layers "
              f"(adapters: qnnrt llm / serve --lora NAME=DIR)")
    print("\n  context binaries:")
    for b in d["binaries"]:
        print(f"    {b['key']}: {b['file_size']} bytes, graphs [{', '.join(b['graphs'])}], weight sharing "
              f"{'yes (the x86 simulator cannot run it)' if b['weight_sharing'] else 'no'}")
