#!/usr/bin/python3
"""PyTorch baseline for strata's seed LM training step.

Model: nn.Embedding(10000, 200) -> nn.LSTM(200, 400, num_layers=8)
       -> nn.Linear(400, 10000); batch 20, seq 35 (seq-major), random token
ids, mean cross-entropy, backward, clip_grad_norm_(5.0), SGD step (lr 1.0).

One timed step = zero_grad + forward + loss + backward + clip + SGD step.
Reports the median over --steps timed steps after --warmup untimed ones.

Use Debian's interpreter (python3-torch):
    /usr/bin/python3 tools/bench/lm_step_torch.py --threads 1 --steps 5
    /usr/bin/python3 tools/bench/lm_step_torch.py --threads 2 --json
    /usr/bin/python3 tools/bench/lm_step_torch.py --device cuda --json
    python3 tools/bench/lm_step_torch.py --device cuda --tf32 --vocab 96 --json
--vocab/--embed/--layers/--hidden/--batch/--seq change the model (strata-bench-lm-gpu
passes its own); --tf32 lets cuDNN and the matmuls use TF32, PyTorch's default for cuDNN;
--bf16 runs the forward pass and the loss under torch.autocast(bfloat16) with float32 weights
(the anchor of strata's --precision bf16).
"""

import argparse
import json
import os
import statistics
import sys
import time

VOCAB = 10000
EMBED = 200
HIDDEN = 400
LAYERS = 8
BATCH = 20
SEQ = 35
CLIP = 5.0
LR = 1.0


def positive_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid int value: %r" % s)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %d" % v)
    return v


def non_negative_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("invalid int value: %r" % s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %d" % v)
    return v


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time the seed LM training step in PyTorch.")
    ap.add_argument("--threads", type=positive_int, default=1,
                    help="torch.set_num_threads (default 1)")
    ap.add_argument("--steps", type=positive_int, default=10,
                    help="timed steps (default 10)")
    ap.add_argument("--warmup", type=non_negative_int, default=2,
                    help="untimed warm-up steps (default 2)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (default) or cuda (uses cuDNN)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed")
    ap.add_argument("--tf32", action="store_true",
                    help="with --device cuda: let cuDNN and matmuls use TF32 tensor cores "
                         "(PyTorch's default for cuDNN); without it every product is fp32")
    ap.add_argument("--bf16", action="store_true",
                    help="with --device cuda: forward and loss under torch.autocast(dtype=bfloat16), "
                         "float32 weights and optimizer")
    for name, default, what in (("vocab", VOCAB, "vocabulary"), ("embed", EMBED, "embedding width"),
                                ("layers", LAYERS, "LSTM layers"), ("hidden", HIDDEN, "hidden size"),
                                ("batch", BATCH, "sequences per step"), ("seq", SEQ, "timesteps per step")):
        ap.add_argument("--" + name, type=positive_int, default=default,
                        help="%s (default %d)" % (what, default))
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object on one line")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    for flag in ("tf32", "bf16"):
        if getattr(args, flag) and args.device != "cuda":
            # Checked before torch is imported, so it fails the same way with or without torch.
            print("error: --%s needs --device cuda." % flag, file=sys.stderr)
            return 2

    # Debian's torch does its GEMMs through the system libblas, normally
    # OpenBLAS (pthread), which ignores torch.set_num_threads and by default
    # starts one thread per core.  Pin every pool to --threads.  And with
    # libgomp's default spin-waiting, torch's idle OpenMP workers steal the
    # cores from OpenBLAS's threads: on a 2-core box --threads 2 took
    # ~2700 ms/step instead of ~710, so make OpenMP workers sleep when idle
    # (unless the caller chose a policy).  Must happen before torch is imported.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import torch
    import torch.nn as nn

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: --device cuda requested but CUDA is not available "
                  "in this PyTorch build or on this machine.", file=sys.stderr)
            return 1
        torch.backends.cudnn.enabled = True
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    device = torch.device(args.device)
    V, E, H, L, B, T = args.vocab, args.embed, args.hidden, args.layers, args.batch, args.seq

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, E)
            self.lstm = nn.LSTM(E, H, num_layers=L)
            self.decoder = nn.Linear(H, V)

        def forward(self, tokens):
            y, _ = self.lstm(self.embedding(tokens))
            return self.decoder(y)

    model = LM().to(device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    criterion = nn.CrossEntropyLoss()
    tokens = torch.randint(0, V, (T, B), device=device)
    targets = torch.randint(0, V, (T, B), device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(tokens)
            loss = criterion(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()

    times_ms = []
    loss = None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times_ms.append((time.perf_counter() - t0) * 1e3)

    med = statistics.median(times_ms)
    tokens_per_s = B * T / (med / 1e3)
    if args.json:
        print(json.dumps({
            "torch_version": torch.__version__,
            "threads": args.threads,
            "device": args.device,
            "tf32": args.tf32,
            "bf16": args.bf16,
            "lm_step_ms": round(med, 3),
            "tokens_per_s": round(tokens_per_s, 1),
            "steps": args.steps,
        }))
    else:
        print("torch %s %s threads=%d: lm_step median %.1f ms over %d steps "
              "(min %.1f, max %.1f), %.0f tokens/s, last loss %.4f"
              % (torch.__version__, device.type, args.threads, med, args.steps,
                 min(times_ms), max(times_ms), tokens_per_s, float(loss)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
