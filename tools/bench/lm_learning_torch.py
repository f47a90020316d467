#!/usr/bin/python3
"""PyTorch twin of strata-bench-learning: trains the LSTM language model strata trained in the
same run, on the same token ids, from the same initial weights, with the same optimizer,
learning-rate schedule, clipping and steps, and evaluates it the same way.

strata-bench-learning writes DIR/config.json (sizes and settings), DIR/train.i32 and
DIR/valid.i32 (token ids, int32 little-endian) and DIR/init.safetensors (strata's initial
parameters, PyTorch names), then runs
    /usr/bin/python3 tools/bench/lm_learning_torch.py --data DIR --json
and reads the JSON line it prints last.

The model: nn.Embedding -> one nn.LSTM(in, H) per layer (the output of layer l >= 2 plus its
input when "residual") -> nn.Linear(H, V). Step k reads window k mod windows of the token stream
cut into `batch` columns (PyTorch's word_language_model batching), from the state the previous
window ended with, detached (word_language_model's repackage_hidden; reset each epoch), or from a
zero state when "carry_state" is false; mean
cross-entropy, clip_grad_norm_(clip), torch.optim's rule at the scheduled rate. Validation: the
validation ids cut into 10 columns, windows of `seq` rows, state carried, at most `val_tokens`
predictions (strata::lm::evaluate_batched).
"""

import argparse
import json
import math
import os
import struct
import sys
import time


def scheduled_lr(c, step):
    """strata::lm::scheduled_lr without the plateau schedule."""
    base, warm = c["lr"], c["warmup_steps"]
    if step < warm:
        return base * (step + 1) / warm
    after = step - warm
    kind = c["lr_schedule"]
    if kind == "constant":
        return base
    if kind == "step":
        return base * c["lr_decay"] ** math.floor(after / max(1, c["lr_step_size"]))
    if kind == "cosine":
        span = c["steps"] - warm if c["steps"] > warm else 1
        return base * 0.5 * (1 + math.cos(math.pi * min(after / span, 1.0)))
    raise ValueError("lr_schedule %r is not constant, step or cosine" % kind)


def load_safetensors(path, torch):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        lo, hi = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(b[8 + n + lo:8 + n + hi]), dtype=torch.float32).reshape(v["shape"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch twin of strata-bench-learning.")
    ap.add_argument("--data", required=True, help="directory strata-bench-learning wrote")
    ap.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = ap.parse_args(argv)
    c = json.load(open(os.path.join(args.data, "config.json")))
    # One pool of c["threads"] threads, idle OpenMP workers sleeping (see lm_step_torch.py).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(c["threads"])
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    import torch.nn as nn
    torch.set_num_threads(c["threads"])

    V, E, H, L, B, T = c["vocab"], c["embed"], c["hidden"], c["layers"], c["batch"], c["seq"]

    def ids(name):
        raw = open(os.path.join(args.data, name), "rb").read()
        return torch.frombuffer(bytearray(raw), dtype=torch.int32).long()

    train, valid = ids("train.i32"), ids("valid.i32")

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, E)
            self.layers = nn.ModuleList(nn.LSTM(E if l == 0 else H, H) for l in range(L))
            self.decoder = nn.Linear(H, V)

        def forward(self, x, state=None):
            y, out = self.embedding(x), []
            for l, lstm in enumerate(self.layers):
                z, st = lstm(y, None if state is None else state[l])
                y = z + y if (c["residual"] and l >= 2) else z
                out.append(st)
            return self.decoder(y), out

    model = LM()
    init = {}
    for k, v in load_safetensors(os.path.join(args.data, "init.safetensors"), torch).items():
        if k.startswith("lstm."):
            name, l = k[5:].rsplit("_l", 1)
            k = "layers.%s.%s_l0" % (l, name)
        init[k] = v
    model.load_state_dict(init)

    kind = c["optimizer"]
    params = model.parameters()
    if kind == "adam":
        opt = torch.optim.Adam(params, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                               weight_decay=c["weight_decay"])
    elif kind == "adamw":
        opt = torch.optim.AdamW(params, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                                weight_decay=c["weight_decay"])
    else:
        opt = torch.optim.SGD(params, lr=c["lr"], momentum=0.0 if kind == "sgd" else c["momentum"],
                              nesterov=kind == "nesterov", weight_decay=c["weight_decay"])
    criterion = nn.CrossEntropyLoss()

    rows = train.numel() // B
    data = train[:rows * B].view(B, rows).t().contiguous()  # [rows, B]: column b = positions b*rows..
    windows = (rows - 1) // T
    losses = []
    carry, carried = c.get("carry_state", False), None
    t0 = time.perf_counter()
    model.train()
    for step in range(c["steps"]):
        for g in opt.param_groups:
            g["lr"] = scheduled_lr(c, step)
        w = step % windows
        x, y = data[w * T:(w + 1) * T], data[w * T + 1:(w + 1) * T + 1]
        if w == 0:
            carried = None  # the column streams start over
        opt.zero_grad()
        logits, st = model(x, carried if carry else None)
        carried = [(h.detach(), cc.detach()) for h, cc in st]
        loss = criterion(logits.reshape(-1, V), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        losses.append(float(loss))
    train_s = time.perf_counter() - t0

    model.eval()
    vb = 10
    vrows = valid.numel() // vb
    if c["val_tokens"] > 0:
        vrows = min(vrows, c["val_tokens"] // vb + 1)
    vrows = max(vrows, 2)
    cols = valid.numel() // vb
    vdata = torch.stack([valid[b * cols:b * cols + vrows] for b in range(vb)], dim=1)  # [vrows, 10]
    total, state = 0.0, None
    with torch.no_grad():
        for r in range(0, vrows - 1, T):
            steps = min(T, vrows - 1 - r)
            logits, state = model(vdata[r:r + steps], state)
            total += float(nn.functional.cross_entropy(logits.reshape(-1, V), vdata[r + 1:r + 1 + steps].reshape(-1),
                                                       reduction="sum"))
    n = (vrows - 1) * vb
    wall_s = time.perf_counter() - t0
    result = {"torch_version": torch.__version__, "threads": c["threads"], "steps": c["steps"],
              "losses": losses, "val_loss": total / n, "val_tokens": n, "train_s": train_s, "wall_s": wall_s}
    if args.json:
        print(json.dumps(result))
    else:
        print("torch %s: %d steps in %.1f s, last loss %.4f, validation loss %.4f (%d tokens)"
              % (torch.__version__, c["steps"], train_s, losses[-1], result["val_loss"], n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
