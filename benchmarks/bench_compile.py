"""Does ``torch.compile`` pay for the simulator's model math? Eager against compiled training steps.

    .venv/bin/python benchmarks/bench_compile.py [--profile cpu] [--sizes 32 57 64 96 128 200] [--rounds 5]

One training step (forward, backward, SGD step) of the profile's model and layout
(``train.channels_last``) on one torch thread, over a cycle of batch sizes: the adaptive policies
hand every worker a different size, so the compiled graph must take dynamic shapes
(``torch.compile(dynamic=True)``) or recompile per size. Both sides see the same batches; rounds
alternate eager / compiled so load drift hits both alike, and each side's time is the median round.
The compiled side's first pass over the sizes (graph capture and code generation) is timed apart:
the pipeline runs each simulation in a fresh worker process, so that cost recurs per process.
The last line is one JSON object; ``compiled_vs_eager_samples_per_s`` > 1 means compiling is faster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dynamix import config
from dynamix.data import BatchMaker, GlobalSampler, load_cifar10
from dynamix.models import build_model
from dynamix.seeding import seed_everything


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 57, 64, 96, 128, 200])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = config.load(profile=args.profile)
    data = load_cifar10(cfg.data)
    sampler, maker = GlobalSampler(len(data.train_y), 0), BatchMaker(data.train_x, data.train_y, cfg.data.augment, 0)
    fmt = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    batches = [(x.contiguous(memory_format=fmt), y) for x, y in (maker(idx) for idx in sampler.next(args.sizes))]
    samples = sum(args.sizes)

    def side(compiled: bool):
        seed_everything(0)
        model = build_model(cfg.model.name, cfg.model.width).to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        fwd = torch.compile(model, dynamic=True) if compiled else model

        def one_pass() -> float:
            t0 = time.perf_counter()
            for x, y in batches:
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(fwd(x), y).backward()
                opt.step()
            return time.perf_counter() - t0

        return one_pass

    eager, compiled = side(False), side(True)
    warm_eager, warm_compiled = eager(), compiled()  # the compiled side captures and generates code here
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(args.rounds):
        times["eager"].append(eager())
        times["compiled"].append(compiled())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "benchmark": "compile_vs_eager", "profile": args.profile, "model": f"{cfg.model.name}@{cfg.model.width:g}",
        "channels_last": cfg.train.channels_last, "sizes": args.sizes, "rounds": args.rounds, "threads": args.threads,
        "samples_per_s": {k: round(samples / v, 1) for k, v in med.items()},
        "first_pass_s": {"eager": round(warm_eager, 2), "compiled": round(warm_compiled, 2)},
        "compiled_vs_eager_samples_per_s": round(med["eager"] / med["compiled"], 4),
    }))


if __name__ == "__main__":
    main()
