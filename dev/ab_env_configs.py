"""Times several environment configurations in one build (a lab tool, GPU machine): runs a
timing script (JSON {"us": {case: us}, ...} to the path it is given first, then ARGS) once
per configuration per round, the configurations interleaved (A B C A B C), one process each,
and prints per case each configuration's two times and its median's ratio to the first
configuration's. dev/ab_env_switch.sh does the same for one switch with two values.

    python3 dev/ab_env_configs.py 'threshold:AOTINFER_SAMPLING_TOP_P=threshold' \\
        'rejection 256:AOTINFER_SAMPLING_TOP_P=rejection,AOTINFER_SAMPLING_ROW_THREADS=256' \\
        -- dev/time_sampling_graph.py 128 512
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

ROUNDS = 2


def parse(spec: str):
    """'LABEL:VAR=VALUE,VAR=VALUE' -> (label, {VAR: VALUE})."""
    label, _, assignments = spec.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if a)
    return label, env


def main() -> None:
    split = sys.argv.index("--")
    configs = [parse(s) for s in sys.argv[1:split]]
    script, args = sys.argv[split + 1], sys.argv[split + 2 :]
    tmp = tempfile.mkdtemp()
    times = {label: [] for label, _ in configs}
    for r in range(ROUNDS):
        for i, (label, env) in enumerate(configs):
            path = os.path.join(tmp, f"{i}-{r}.json")
            run = subprocess.run(
                [sys.executable, script, path, *args],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                sys.exit(f"{label} failed:\n{run.stdout}\n{run.stderr}")
            with open(path) as f:
                times[label].append(json.load(f)["us"])
    first = configs[0][0]
    print("configurations:", "; ".join(f"{label} = {env}" for label, env in configs))
    print(f"ratios: median / {first}'s median")
    for case in times[first][0]:
        cells = []
        base = statistics.median(t[case] for t in times[first])
        for label, _ in configs:
            runs = [t[case] for t in times[label]]
            ratio = statistics.median(runs) / base
            cells.append(f"{label} {' '.join(f'{x:6.1f}' for x in runs)} ({ratio:5.3f})")
        print(f"{case:28s} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
