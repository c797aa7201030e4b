"""``dynamix calibrate``: fit the compute model t(b) = a_m + c_m b on this machine, e.g.

    dynamix calibrate --model tiny-cnn                       # replaces calibrations/tiny-cnn.json
    dynamix calibrate --model resnet20 --width 0.5 --out /tmp/cal --batch-sizes 16 32 64 128 --repeats 7
    dynamix calibrate --model vgg11 --device cuda --amp bf16

Without ``--out`` it writes the reference calibration every simulated run reads
(``calibrations/``, tracked) and says what it changed: the explicit step for one's own hardware.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from dynamix import paths
from dynamix.models import REGISTRY
from dynamix.sim.calibrate import DEFAULT_BATCH_SIZES, calibrate, calibration_path, read_calibration


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, choices=sorted(REGISTRY))
    parser.add_argument("--width", type=float, default=1.0, help="channel multiplier (default 1)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(DEFAULT_BATCH_SIZES))
    parser.add_argument("--repeats", type=int, default=5, help="timed iterations per batch size")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads while timing (default 1: one engine worker per core)")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when available) | cpu | cuda | cuda:N, as train.device (default auto)")
    parser.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"],
                        help="mixed precision on CUDA, as train.amp (default none)")
    parser.add_argument("--out", default=None, help="folder for the JSON (default: calibrations/, the reference "
                        "every simulated run reads)")


def main(args: argparse.Namespace) -> int:
    from dynamix import config
    from dynamix.rundir import lock, out_path

    config.build(config.ModelConfig, {"name": args.model, "width": args.width}, prefix="model")
    config.check_value("--repeats", args.repeats, config.rng(1, 10000))
    config.check_value("--threads", args.threads, config.rng(1, 256))  # train.threads' bound
    config.check_value("--batch-sizes", tuple(args.batch_sizes), config.rng(1, 65536))
    folder = out_path(args.out) if args.out is not None else paths.CALIBRATION
    lock(folder)  # one calibration at a time writes a folder
    path = calibration_path(args.model, args.width, folder)
    before = read_calibration(path) if path.exists() else None
    command = (f"dynamix calibrate --model {args.model} --width {args.width:g} --batch-sizes "
               f"{' '.join(map(str, args.batch_sizes))} --repeats {args.repeats} --threads {args.threads} "
               f"--device {args.device} --amp {args.amp}")
    cal = calibrate(args.model, args.width, tuple(args.batch_sizes), args.repeats, args.threads, out_dir=folder,
                    device=args.device, amp=args.amp, command=command)
    print(json.dumps({**asdict(cal), "path": str(path)}, indent=2))
    if args.out is None:
        was = (f"replaces a = {before.a_ms:.4g} ms, c = {before.c_ms_per_sample:.4g} ms/sample (measured on "
               f"{before.host}, {before.machine or 'machine not recorded'})" if before else "is new")
        print(f"wrote {path}: a = {cal.a_ms:.4g} ms, c = {cal.c_ms_per_sample:.4g} ms/sample {was}; every "
              f"simulated run of {args.model} (width {args.width:g}) now uses it. `git diff calibrations/` shows "
              "the change, `git checkout calibrations/` restores the reference", file=sys.stderr)
    return 0
