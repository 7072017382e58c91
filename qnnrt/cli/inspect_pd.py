"""`qnnrt inspect PATH --pd [--budget SIZE] [--json]`: each context's PD need predicted from its
binary (no context is created), the sum, peaks per residency and whether / how the program fits."""
from __future__ import annotations

from pathlib import Path

from qnnrt.core.pd_need import PARTS
from qnnrt.errors import FormatError
from qnnrt.units import format_bytes, parse_size

MAX_ROWS = 40  # a longer table prints its first and last rows (--json has them all)
HEAD = {"non_shared_weights": "weights", "io": "I/O", "runlist": "runlist", "spill_fill": "spill-fill",
        "vtcm": "VTCM"}


def describe_pd(path: Path, backend_lib: str | None = None, budget: str | None = None,
                max_pds: int | None = None) -> dict:
    from qnnrt.loader import open_for_planning
    from qnnrt.runtime.residency.budget import Budget, backend_identity, resolve_budget
    from qnnrt.runtime.hosts.pd.placement import plan
    binaries, methods, soc_model, owned, lib = open_for_planning(path, backend_lib)
    try:
        contexts, notes = [], []
        for key, b in binaries.items():  # program order
            try:
                need = b.pd_need()
                row = {"key": key, **need.to_dict()}
            except FormatError as e:
                row = {"key": key, "predicted_bytes": None, "parts": dict.fromkeys(PARTS),
                       "graphs": [], "notes": [str(e)]}
            notes += [f"{key}: {n}" for n in row["notes"]]
            contexts.append(row)
        identity = backend_identity(lib, soc_model)
        bud = (Budget(parse_size(budget, "--budget"), "override") if budget
               else resolve_budget(identity))
        sizes = {c["key"]: c["predicted_bytes"] for c in contexts}
        orders = {name: m.graph_order for name, m in methods.items()}
        p = plan(orders, sizes, bud.bytes if bud else None)
        placement = _placement(orders, sizes, bud, max_pds)
        unknown = [c["key"] for c in contexts if c["predicted_bytes"] is None]
        if unknown:
            notes.insert(0, f"{len(unknown)} context(s) have unknown parts (predicted_bytes null): the "
                            f"total and the plan are not given; QNN reports their need at creation")
        return {"path": str(path), "contexts": contexts, "total_bytes": p["total_bytes"],
                "spill_fill_group": spill_fill_group_figures(contexts),
                "budget_bytes": bud.bytes if bud else None,
                "budget_source": bud.source if bud else None,
                "budget_note": bud.describe() if bud else
                "unknown: not learned for this backend yet (a run of auto finds it); pass --budget",
                "backend_identity": identity, "eager_fits": p["eager_fits"],
                "methods": p["methods"], "placement": placement, "notes": notes}
    finally:
        for b in binaries.values():
            b.close()
        for c in owned:
            c.close()


def _placement(orders: dict, sizes: dict, bud, max_pds: int | None) -> dict | None:
    """The multi-PD placement `auto` (or multi-pd) would use; None when one PD holds everything."""
    from qnnrt.errors import QnnrtError
    from qnnrt.runtime.hosts.pd.placement import first_use_order, place
    from qnnrt.runtime.residency.budget import DEFAULT_MAX_PDS
    if bud is None or None in sizes.values() or sum(sizes.values()) <= bud.bytes:
        return None
    n = DEFAULT_MAX_PDS if max_pds is None else max_pds
    try:
        return place(first_use_order(orders, list(sizes)), sizes, bud.bytes, n, None,
                     bud.source).to_dict() | {"max_pds": n}
    except QnnrtError as e:
        return {"max_pds": n, "error": str(e)}


def spill_fill_group_figures(contexts: list[dict]) -> dict | None:
    """The program's PD need if its contexts were one spill-fill group (REGISTER_MULTI_CONTEXTS:
    one buffer of the largest spill-fill size instead of one per graph), beside the plain sum.
    A prediction from the parts: the simulator refuses groups, so it is not measured here."""
    sf = [c["parts"].get("spill_fill") for c in contexts]
    totals = [c["predicted_bytes"] for c in contexts]
    if not contexts or None in sf or None in totals:
        return None
    plain = sum(totals)
    grouped = plain - sum(sf) + max(sf)
    return {"total_bytes": grouped, "group_buffer_bytes": max(sf), "saved_bytes": plain - grouped}


def _fmt(v: int | None) -> str:
    return "unknown" if v is None else str(v)


def print_pd(d: dict) -> None:
    ctxs = d["contexts"]
    print(f"{d['path']}: {len(ctxs)} context(s); PD need predicted from the binaries "
          f"(no context created), bytes")
    head = ["context"] + [HEAD[p] for p in PARTS] + ["total"]
    rows = [[c["key"]] + [_fmt(c["parts"].get(p)) for p in PARTS] + [_fmt(c["predicted_bytes"])]
            for c in ctxs]
    shown = rows if len(rows) <= MAX_ROWS else rows[:MAX_ROWS - 5] + [["..."] + [""] * 6] + rows[-5:]
    widths = [max(len(r[i]) for r in [head] + shown) for i in range(len(head))]
    for r in [head] + shown:
        print("  " + r[0].ljust(widths[0]) + "  " + "  ".join(c.rjust(w) for c, w in
                                                               zip(r[1:], widths[1:])))
    if len(rows) > MAX_ROWS:
        print(f"  ({len(rows) - MAX_ROWS} rows not shown; --json lists every context)")
    print(f"  sum: {_fmt(d['total_bytes'])} B ({format_bytes(d['total_bytes'])})")
    g = d.get("spill_fill_group")
    if g is not None and len(ctxs) > 1 and not g["group_buffer_bytes"]:
        print("  spill-fill group: no graph needs a spill-fill buffer, so a group would save nothing")
    elif g is not None and len(ctxs) > 1:
        print(f"  as one spill-fill group (devices that accept REGISTER_MULTI_CONTEXTS; predicted): "
              f"{g['total_bytes']} B ({format_bytes(g['total_bytes'])}), one {format_bytes(g['group_buffer_bytes'])} "
              f"buffer instead of one per graph, saves {format_bytes(g['saved_bytes'])}")
    print(f"  budget: {d['budget_note']}")
    fits = d["eager_fits"]
    if fits is not None:
        print(f"  eager {'fits' if fits else 'does NOT fit'}: all contexts need "
              f"{format_bytes(d['total_bytes'])} of {format_bytes(d['budget_bytes'])}")
    for name, m in d["methods"].items():
        print(f"\n  method {name}: {m['graph_calls']} graph call(s) over {m['contexts_used']} context(s)")
        if m.get("peaks"):
            print("    peak PD by residency: " + ", ".join(f"{k} {format_bytes(v)}"
                                                        for k, v in m["peaks"].items()))
        if m.get("min_creations_per_iteration") is not None:
            print(f"    fewest context creations per iteration within the budget: "
                  f"{m['min_creations_per_iteration']} ({m['residency']})")
        elif m.get("residency"):
            print(f"    {m['residency']}")
    pl = d.get("placement")
    if pl and pl.get("error"):
        print(f"\n  multi-PD placement: none within --max-pds {pl['max_pds']} ({pl['error']}); auto "
              f"evicts on one PD")
    elif pl:
        print(f"\n  multi-PD placement (auto, every context resident): {pl['pds']} PDs (PD 0 in "
              f"the running process, the others in worker processes), each under "
              f"{format_bytes(pl['budget_bytes'])}")
        for g in pl["groups"]:
            print(f"    PD {g['pd']}: {g['contexts']} context(s) {g['first']} .. {g['last']}, "
                  f"{format_bytes(g['predicted_bytes'])}")
    for n in d["notes"]:
        print(f"  note: {n}")
