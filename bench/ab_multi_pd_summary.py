"""Summary of bench/ab_multi_pd_load.sh's lines (read from stdin or the files given): per load and
tree, the median over the rounds of one PD's and multi-pd:2's iteration, of the rounds' ratios, and
the ratio of the fastest rounds (the least disturbed by whatever else ran).

    bash bench/ab_multi_pd_load.sh ... | tee ab.log; python bench/ab_multi_pd_summary.py ab.log
"""
from __future__ import annotations

import fileinput
import re
import statistics
from collections import defaultdict

_LINE = re.compile(r"^(\d+) (idle|busy) (\S+) (eager|multi-pd:2): ([0-9.]+) ms .*\| load ([0-9.]+)")


def main() -> None:
    runs: dict[tuple[str, str], dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    loads: list[float] = []
    for line in fileinput.input():
        m = _LINE.match(line.strip())
        if m:
            r, load, tree, res, ms, avg = m.groups()
            runs[(load, tree)][res][int(r)] = float(ms)
            loads.append(float(avg))
    print("| load | tree | one PD ms (median of rounds) | multi-pd:2 ms "
          "| multi / one PD (median of the rounds' ratios, min-max) | ratio of the rounds' fastest |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (load, tree), by in runs.items():
        rounds = sorted(set(by["eager"]) & set(by["multi-pd:2"]))
        if not rounds:
            continue
        ratios = [by["multi-pd:2"][r] / by["eager"][r] for r in rounds]
        print(f"| {load} | {tree} | {statistics.median(by['eager'][r] for r in rounds):.3f} | "
              f"{statistics.median(by['multi-pd:2'][r] for r in rounds):.3f} | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}, {len(rounds)} rounds) | "
              f"{min(by['multi-pd:2'][r] for r in rounds) / min(by['eager'][r] for r in rounds):.2f}x |")
    if loads:
        print(f"load average during the runs: {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
