"""``dynamix calibrate``: fit the compute model t(b) = a_m + c_m b on this machine, e.g.

    dynamix calibrate --model tiny-cnn
    dynamix calibrate --model resnet20 --width 0.5 --batch-sizes 16 32 64 128 --repeats 7
    dynamix calibrate --model vgg11 --device cuda --amp bf16
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from dynamix.models import REGISTRY
from dynamix.sim.calibrate import DEFAULT_BATCH_SIZES, calibrate, calibration_path


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


def main(args: argparse.Namespace) -> int:
    cal = calibrate(args.model, args.width, tuple(args.batch_sizes), args.repeats, args.threads,
                    device=args.device, amp=args.amp)
    print(json.dumps({**asdict(cal), "path": str(calibration_path(args.model, args.width))}, indent=2))
    return 0
