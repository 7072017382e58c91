"""ExecutionProfiler aggregation, driven with the event trees QNN's x86 simulator produces."""
from __future__ import annotations

import csv
import io
import json
import threading

import pytest

from qnnrt.errors import QnnrtError
from qnnrt.profiling.exec_profile import ExecutionProfiler, classify_event, clean_op_name


def ev(name, unit, value, sub=(), type_=0):
    return {"name": name, "type": type_, "unit": unit, "value": value, "sub": list(sub)}


def load_events(qnn_us=4858, accel_us=1638):
    return [ev("Accelerator (load binary) time", "us", accel_us, type_=1004),
            ev("QNN (load binary) time", "us", qnn_us, type_=100)]


def detailed_execute(qnn_us, accel_us, cycles, ops):
    """As read from the simulator at DETAILED level (out_t6.txt)."""
    return [ev("Number of HVX threads used", "count", 0, type_=8001),
            ev("Num times yield occured", "count", 0, type_=3009),
            ev("Time for initial VTCM acquire", "us", 879, type_=3010),
            ev("Accelerator (execute) time (cycles)", "cycles", cycles,
               [ev(n, "cycles", v, type_=404) for n, v in ops], type_=3003),
            ev("Accelerator (execute) time", "us", accel_us, type_=3004),
            ev("QNN (execute) time", "us", qnn_us, type_=400)]


RUN1 = detailed_execute(5928, 5777, 21665, [("Input OpId_2 (cycles)", 641), ("Add0:OpId_17 (cycles)", 3631),
                                            ("Relu1:OpId_18 (cycles)", 6065), ("Mul2:OpId_20 (cycles)", 7613),
                                            ("Output OpId_3 (cycles)", 3715)])
RUN2 = detailed_execute(235, 207, 17807, [("Input OpId_2 (cycles)", 255), ("Add0:OpId_17 (cycles)", 3295),
                                          ("Relu1:OpId_18 (cycles)", 4140), ("Mul2:OpId_20 (cycles)", 6638),
                                          ("Output OpId_3 (cycles)", 3479)])


def make_profiler() -> ExecutionProfiler:
    p = ExecutionProfiler("detailed")
    p.record("context_create", None, "ctx_a", load_events())
    p.record("context_create", None, "ctx_b", load_events(641, 443))
    p.record("execute", "g_add", "ctx_a", RUN1, iteration=0)
    p.record("execute", "g_add", "ctx_a", RUN2, iteration=1)
    basic = [ev("Number of HVX threads used", "count", 0), ev("Accelerator (execute) time", "us", 100),
             ev("QNN (execute) time", "us", 120)]
    for i in range(3):
        p.record("execute", "g_small", "ctx_b", basic, iteration=i)
    p.record("context_free", None, "ctx_a", [ev("Accelerator (deinit) time", "us", 48),
                                             ev("QNN (deinit) time", "us", 87)])
    return p


def by(rows, **keys):
    return [r for r in rows if all(r.get(k) == v for k, v in keys.items())]


def test_per_graph_aggregation_numbers():
    data = make_profiler().to_json()
    assert data["level"] == "detailed"
    g = by(data["graphs"], graph="g_add")[0]
    assert g["context"] == "ctx_a" and g["executions"] == 2 and g["iterations"] == 2
    assert g["qnn_us"]["total"] == 5928 + 235 and g["qnn_us"]["mean"] == pytest.approx((5928 + 235) / 2)
    assert (g["qnn_us"]["min"], g["qnn_us"]["max"]) == (235, 5928)
    assert g["accel_us"]["total"] == 5777 + 207
    assert g["cycles"]["total"] == 21665 + 17807 and g["cycles"]["min"] == 17807
    small = by(data["graphs"], graph="g_small")[0]
    assert small["qnn_us"] == {"count": 3, "total": 360, "mean": 120.0, "min": 120, "max": 120,
                               "median": 120, "p90": 120}
    assert small["cycles"] is None                       # basic level: no cycles
    assert [x["graph"] for x in data["graphs"]] == ["g_add", "g_small"]    # largest first
    assert all(x["records_without_qnn_time"] == 0 for x in data["graphs"])  # events for every graph
    t = data["totals"]
    assert t["executions"] == 5 and t["graphs"] == 2
    assert t["qnn_execute_us"] == 5928 + 235 + 360
    assert t["accel_cycles"] == 21665 + 17807
    assert t["context_creates"] == 2 and t["qnn_load_us"] == 4858 + 641


def test_per_op_cycles_summed_across_iterations_with_clean_names():
    ops = make_profiler().to_json()["ops"]
    assert {o["op"] for o in ops} == {"Input", "Add0", "Relu1", "Mul2", "Output"}
    add = by(ops, op="Add0")[0]
    assert add["op_id"] == 17 and add["unit"] == "cycles" and add["executions"] == 2
    assert add["total"] == 3631 + 3295
    assert add["share_pct"] == pytest.approx(100 * (3631 + 3295) / (21665 + 17807), abs=0.01)
    assert ops[0]["op"] == "Mul2"                        # largest total first
    assert by(ops, op="Input")[0]["op_id"] == 2


def test_context_phases_and_unknown_events_are_kept():
    data = make_profiler().to_json()
    a = by(data["contexts"], context="ctx_a")[0]
    assert a["creates"] == 1 and a["frees"] == 1
    assert a["load_qnn_us"]["total"] == 4858 and a["load_accel_us"]["total"] == 1638
    assert a["deinit_qnn_us"]["total"] == 87
    other = {(o["phase"], o["name"]): o for o in data["other_events"]}
    assert other[("execute", "Number of HVX threads used")]["count"] == 5
    assert other[("execute", "Time for initial VTCM acquire")]["total"] == 879 * 2


def test_similar_device_events_are_not_double_counted():
    p = ExecutionProfiler("basic")
    p.record("execute", "g", "c", [ev("QNN (execute) time", "us", 500),
                                   ev("Accelerator (execute) time", "us", 400),
                                   ev("Accelerator (execute excluding wait) time", "us", 300),
                                   ev("QNN accelerator (execute) time", "us", 410)])
    g = p.to_json()["graphs"][0]
    assert g["qnn_us"]["total"] == 500 and g["accel_us"]["total"] == 400
    names = {o["name"] for o in p.to_json()["other_events"]}
    assert {"Accelerator (execute excluding wait) time", "QNN accelerator (execute) time"} <= names


def test_units_other_than_us_are_converted_and_op_us_kept_apart():
    p = ExecutionProfiler("detailed")
    p.record("execute", "g", "c", [ev("QNN (execute) time", "ms", 2),
                                   ev("Accelerator (execute) time", "us", 900,
                                      [ev("Conv:OpId_4 (us)", "us", 700), ev("odd", "count", 3)])])
    data = p.to_json()
    assert data["graphs"][0]["qnn_us"]["total"] == 2000
    assert [(o["op"], o["unit"], o["total"]) for o in data["ops"]] == [("Conv", "us", 700)]


def test_same_graph_name_in_two_contexts_stays_apart():
    p = ExecutionProfiler("basic")
    for ctx, v in (("c1", 10), ("c2", 20)):
        p.record("execute", "QNNExecutionProvider_1_0", ctx, [ev("QNN (execute) time", "us", v)])
    assert sorted((g["context"], g["qnn_us"]["total"]) for g in p.to_json()["graphs"]) == [("c1", 10), ("c2", 20)]


def test_missing_times_are_flagged():
    p = ExecutionProfiler("basic")
    p.record("execute", "g", "c", [])
    assert p.to_json()["graphs"][0]["records_without_qnn_time"] == 1


def test_off_level_records_nothing_and_bad_level_raises():
    p = ExecutionProfiler("off")
    assert not p.enabled
    p.record("execute", "g", "c", RUN1)
    assert p.to_json()["graphs"] == [] and p.summary_table() == "Execution profile: off"
    with pytest.raises(QnnrtError, match="off"):
        ExecutionProfiler("verbose")


@pytest.mark.parametrize("raw, name, op_id", [
    ("Add0:OpId_17 (cycles)", "Add0", 17),
    ("Input OpId_2 (cycles)", "Input", 2),
    ("Output OpId_3 (cycles)", "Output", 3),
    ("/model/layers.0/MatMul:OpId_123 (us)", "/model/layers.0/MatMul", 123),
    ("Relu1 (cycles)", "Relu1", None),
    ("plain", "plain", None),
])
def test_clean_op_name(raw, name, op_id):
    assert clean_op_name(raw) == (name, op_id)


def test_classify_event():
    assert classify_event("QNN (execute) time", "us") == "qnn_us"
    assert classify_event("Accelerator (execute) time", "us") == "accel_us"
    assert classify_event("Accelerator (execute) time (cycles)", "cycles") == "cycles"
    assert classify_event("QNN (load binary) time", "us", "context_create") == "qnn_us"
    assert classify_event("QNN (load binary) time", "us", "execute") is None
    assert classify_event("Number of HVX threads used", "count") is None


def test_write_json_and_csv(tmp_path):
    p = make_profiler()
    j, c = p.write(str(tmp_path / "prof.json"))
    assert j == str(tmp_path / "prof.json") and c == str(tmp_path / "prof.csv")
    assert json.load(open(j))["totals"]["executions"] == 5
    rows = list(csv.DictReader(io.StringIO(open(c).read())))
    kinds = [r["kind"] for r in rows]
    assert kinds.count("graph") == 2 and kinds.count("op") == 5 and kinds.count("context_create") == 2
    g = by(rows, kind="graph", graph="g_add")[0]
    assert int(g["qnn_us_total"]) == 6163 and int(g["cycles_total"]) == 39472
    add = by(rows, kind="op", op="Add0")[0]
    assert int(add["cycles_total"]) == 6926 and add["op_id"] == "17"
    # a .csv path gives the JSON its own name instead of overwriting
    j2, c2 = p.write(str(tmp_path / "other.csv"))
    assert j2.endswith("other.json") and c2.endswith("other.csv")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["other.csv", "other.json", "prof.csv", "prof.json"]


def test_write_bad_path(tmp_path):
    with pytest.raises(QnnrtError, match="execution profile.*does not exist"):
        make_profiler().write(str(tmp_path / "no" / "prof.json"))


def test_summary_table_lists_top_graphs_and_ops():
    table = make_profiler().summary_table(top=3)
    assert "level detailed" in table and "2 graph(s), 5 execution(s)" in table
    lines = table.splitlines()
    graph_rows = lines[lines.index(next(l for l in lines if l.startswith("Top 2 graphs"))) + 2:][:2]
    assert graph_rows[0].split()[0] == "g_add" and graph_rows[1].split()[0] == "g_small"
    assert "Top 3 ops by accelerator cycles" in table
    op_section = table.split("Top 3 ops")[1]
    assert "Mul2" in op_section and "Input" not in op_section   # only the top 3
    assert "Context creation in this process: 2 create(s)" in table


def test_summary_table_when_nothing_was_recorded():
    assert "no profile events" in ExecutionProfiler("basic").summary_table()


def test_long_graph_names_are_shortened_in_the_table():
    p = ExecutionProfiler("basic")
    name = "QNNExecutionProvider_QNNExecutionProvider_16485836581743460854_1_0"
    p.record("execute", name, "ctx", [ev("QNN (execute) time", "us", 5)])
    row = [l for l in p.summary_table().splitlines() if "..." in l][0]
    assert row.split()[0].startswith("QNNExecution") and row.split()[0].endswith("_1_0")


def test_concurrent_records_are_all_counted():
    p = ExecutionProfiler("detailed")

    def worker(k):
        for i in range(200):
            p.record("execute", f"g{k % 2}", "c", RUN2, iteration=i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = p.to_json()
    assert data["totals"]["executions"] == 800
    assert sum(g["qnn_us"]["count"] for g in data["graphs"]) == 800
    assert by(data["ops"], op="Add0", graph="g0")[0]["total"] == 3295 * 400
