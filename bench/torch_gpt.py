#!/usr/bin/env python3
"""PyTorch GPT training baseline: the number parity's `bench model --path fast` is measured against.

It trains, in plain PyTorch as a user would (autocast bfloat16, fused AdamW, torch.compile,
scaled_dot_product_attention), the same GPT that parity defines (reference/theory/model_config.hpp,
built by reference/model/model.cpp): token + learned position embeddings, L pre-LN blocks (fused
qkv Linear with columns [q | k | v], causal attention, FFN 4h with tanh GeLU), final LayerNorm,
LM head tied to the token table, mean cross-entropy; GPT-2 initialisation; AdamW lr 1e-3,
betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter; no dropout. On random tokens
it reports the median step time, tokens/s and MFU (Megatron-LM FLOPs, attention counted in full).

usage: python3 bench/torch_gpt.py --model gpt2-medium --batch 8 --steps 20 --json out.json
"""
import argparse
import contextlib
import inspect
import json
import math
import statistics
import sys
import time

PROG = "torch_gpt.py"
# name: (layers, hidden, heads, sequence, vocabulary, default batch). Vocabulary 50304 is GPT-2's
# 50257 padded to a multiple of 128.
PRESETS = {
    "gpt2-medium": (24, 1024, 16, 1024, 50304, 8),
    "gpt-1.3b": (24, 2048, 16, 2048, 50304, 4),
    "gpt-2.7b": (32, 2560, 32, 2048, 50304, 2),
    "tiny": (2, 64, 4, 64, 256, 4),
}
# Dense bfloat16 peak TFLOP/s (NVIDIA datasheets): the first row whose words all appear in the
# device name wins.
PEAK_TFLOPS = [(("H100", "PCIe"), 756.0), (("H100", "NVL"), 835.0), (("H100",), 989.4), (("H200",), 989.4),
               (("A100",), 312.0)]


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise UsageError(message)


def parse_args(argv):
    p = Parser(prog=PROG, description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1],
               formatter_class=argparse.RawDescriptionHelpFormatter,
               epilog="Step FLOPs = 72 B T L h^2 (1 + T/(6h) + V/(12 h L)) (Narayanan et al. 2021, eq. 3). "
                      "MFU = step FLOPs / median step seconds / peak. Exit status 2: bad arguments.")
    p.add_argument("--model", default="gpt2-medium", metavar="NAME",
                   help="preset: " + ", ".join(f"{k} (L={v[0]} h={v[1]} heads={v[2]} T={v[3]} V={v[4]})"
                                               for k, v in PRESETS.items()) + " (default gpt2-medium)")
    for name, what in (("layers", "blocks L"), ("hidden", "hidden size h"), ("heads", "attention heads (divide h)"),
                       ("sequence", "sequence length T"), ("vocabulary", "vocabulary V")):
        p.add_argument("--" + name, type=int, metavar="N", help=f"override the preset's {what}")
    p.add_argument("--batch", type=int, metavar="B",
                   help="sequences per step (default per preset: " +
                        ", ".join(f"{k} {v[5]}" for k, v in PRESETS.items()) + ")")
    p.add_argument("--steps", type=int, default=10, metavar="N", help="timed steps; the median is reported (default 10)")
    p.add_argument("--warmup", type=int, default=3, metavar="W",
                   help="untimed steps first, where compilation and autotuning happen (default 3)")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available, else cpu")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="bfloat16: torch.autocast with float32 parameters (default); float32: no autocast")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on with torch >= 2.0 on cuda; unavailable before 2.0)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the weights and of the random tokens (default 1234)")
    p.add_argument("--peak-tflops", type=float, metavar="X",
                   help="peak TFLOP/s for MFU; default: looked up for H100/H200/A100 (dense bf16), else MFU is NaN")
    p.add_argument("--json", metavar="PATH", help="write the results as one JSON object to PATH")
    args = p.parse_args(argv)
    if args.model not in PRESETS:
        raise UsageError(f"unknown model '{args.model}' (known: {', '.join(PRESETS)})")
    preset = PRESETS[args.model]
    overridden = False
    for i, name in enumerate(("layers", "hidden", "heads", "sequence", "vocabulary")):
        if getattr(args, name) is None:
            setattr(args, name, preset[i])
        else:
            overridden = True
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1, not {getattr(args, name)}")
    args.name = "custom" if overridden else args.model
    args.batch = preset[5] if args.batch is None else args.batch
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, not {args.batch}")
    if args.steps < 1 or args.warmup < 0:
        raise UsageError("--steps must be at least 1 and --warmup at least 0")
    if args.hidden % args.heads:
        raise UsageError(f"--heads {args.heads} does not divide --hidden {args.hidden}")
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise UsageError("--peak-tflops must be positive")
    return args


def build_model(torch, L, h, H, T, V, sdpa):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-5), nn.LayerNorm(h, eps=1e-5)
            self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def attention(self, x):
            B, t, _ = x.shape
            # Columns [q | k | v]; head i is columns i*hs..(i+1)*hs of each.
            q, k, v = (z.view(B, t, H, h // H).transpose(1, 2) for z in self.qkv(x).split(h, dim=2))
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h // H))
                future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                y = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(B, t, h))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, h), nn.Embedding(T, h)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(h, eps=1e-5)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)
            for b in self.blocks:  # residual projections
                nn.init.normal_(b.proj.weight, 0.0, 0.02 / math.sqrt(2 * L))
                nn.init.normal_(b.fc2.weight, 0.0, 0.02 / math.sqrt(2 * L))

        def forward(self, tokens, targets):
            x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
            for b in self.blocks:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # head tied to wte
            return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))

    return GPT()


def peak_for(name):
    for words, tflops in PEAK_TFLOPS:
        if all(w in name for w in words):
            return tflops
    return None


def run(args):
    try:
        import torch
    except ImportError:
        raise UsageError(f"PyTorch is not installed for {sys.executable}")
    cuda = torch.cuda.is_available()
    device = args.device or ("cuda" if cuda else "cpu")
    if device == "cuda" and not cuda:
        raise UsageError("--device cuda asked for, but torch sees no CUDA device")
    major = int(torch.__version__.split(".")[0])
    can_compile = major >= 2 and hasattr(torch, "compile")
    compiled = (can_compile and device == "cuda") if args.compile is None else args.compile
    if compiled and not can_compile:
        print(f"{PROG}: torch.compile is unavailable in torch {torch.__version__}; continuing without it",
              file=sys.stderr)
        compiled = False
    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    L, h, H, T, V, B = args.layers, args.hidden, args.heads, args.sequence, args.vocabulary, args.batch

    torch.manual_seed(args.seed)
    model = build_model(torch, L, h, H, T, V, sdpa).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    fused = device == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                                  **({"fused": True} if fused else {}))
    step_model = torch.compile(model) if compiled else model
    autocast = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if args.dtype == "bfloat16" \
        else contextlib.nullcontext
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    print(f"{PROG}: {args.name} L={L} h={h} heads={H} T={T} V={V} B={B}, {parameters:,} parameters, {args.dtype} "
          f"on {device_name}, torch {torch.__version__}, compile {compiled}, sdpa {sdpa}", file=sys.stderr)

    warmup_s, step_s, losses = [], [], []
    for i in range(args.warmup + args.steps):
        tokens = torch.randint(0, V, (B, T + 1), generator=generator, device=device)  # before timing
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        sync()
        start = time.perf_counter()
        with autocast():
            loss = step_model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        seconds = time.perf_counter() - start
        losses.append(loss.item())
        (warmup_s if i < args.warmup else step_s).append(seconds)
        n, total = (i + 1, args.warmup) if i < args.warmup else (i + 1 - args.warmup, args.steps)
        print(f"{PROG}: {'warmup' if i < args.warmup else 'step'} {n}/{total}: loss {losses[-1]:.4f}, "
              f"{seconds * 1e3:.1f} ms", file=sys.stderr)

    median = statistics.median(step_s)
    flops = 72.0 * B * T * L * h * h * (1 + T / (6.0 * h) + V / (12.0 * h * L))
    peak = args.peak_tflops if args.peak_tflops is not None else (peak_for(device_name) if device == "cuda" else None)
    mfu = flops / median / (peak * 1e12) if peak else None
    # Compilation, autotuning and allocator warm-up: what the warmup steps took beyond steady state.
    compile_s = max(0.0, sum(warmup_s) - len(warmup_s) * median)
    result = {
        "model": args.name, "layers": L, "hidden": h, "heads": H, "sequence": T, "vocabulary": V, "batch": B,
        "dtype": args.dtype, "device": device, "device_name": device_name, "torch_version": torch.__version__,
        "compiled": compiled, "sdpa": sdpa, "parameters": parameters, "step_seconds": step_s,
        "warmup_seconds": warmup_s, "median_step_s": median, "tokens_per_s": B * T / median, "step_flops": flops,
        "peak_tflops": peak, "mfu": mfu, "compile_s": compile_s, "losses": losses,
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None,
    }
    print(f"{PROG}: {args.name}: median step {median * 1e3:.1f} ms, {result['tokens_per_s']:,.0f} tokens/s, "
          f"{flops / median / 1e12:.4g} TFLOP/s, MFU {mfu if mfu is not None else float('nan'):.3f}"
          f" (peak {peak or 'unknown'} TFLOP/s), compile/warm-up {compile_s:.1f} s, final loss {losses[-1]:.4f}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main(argv=None):
    try:
        return run(parse_args(argv))
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
