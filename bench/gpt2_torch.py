#!/usr/bin/python3
"""A parity GPT in PyTorch under Hugging Face's GPT-2 names, and its state_dict to and from
parity's GPT-2 files (`parity state export` / `parity state import`).

  to-torch FILE.h5 OUT.pt     the file's tensors as a PyTorch state_dict (torch.save), its
                              GPT2Config beside as OUT.json
  from-torch IN.pt OUT.h5     a state_dict (and IN.json beside it) as a parity GPT-2 file;
                              GPT-2's causal-mask buffers (attn.bias, attn.masked_bias) are left out
  check FILE.h5 IN.pt         builds the GPT-2 below from IN.pt (its config from IN.json), runs it
                              on the tokens parity exported, and compares its logits with parity's:
                              exit 0 within the bound, 1 beyond it

The model: GPT2LMHeadModel's modules and parameter names (transformer.wte, transformer.wpe,
transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f,
lm_head tied to wte), Conv1D weights stored [in, out], GeLU's tanh form (gelu_new), LayerNorm
epsilon 1e-5, attention scaled by 1/sqrt(head size) under a causal mask, no dropout (eval).

The bound of `check`, for two float64 (or float32) computations of the same logits that differ
only in the order of their sums: each op's result carries at most gamma_K = K u / (1 - K u) of
its sum of absolute terms (K the longest reduction: 4 n_embd, the sequence or the vocabulary),
a token's logits pass through a chain of R = 28 L + 11 such ops (tolerance.hpp's
gpt_rounding_chain), and the conditioning assumption kappa = 4 of tolerance.hpp gives
||logits - parity|| / ||parity|| <= 4 R gamma_K (u = 2^-53 in float64, 2^-24 in float32).
Exit status 2 for bad arguments or files, in one line.
"""

import argparse
import json
import math
import os
import sys

SCHEMA = "parity-gpt2"
CONFIG_KEYS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
               "layer_norm_epsilon", "activation_function", "tie_word_embeddings")
BUFFERS = (".attn.bias", ".attn.masked_bias")


def fail(message, status=2):
    print(f"gpt2_torch: {message}", file=sys.stderr)
    sys.exit(status)


def imports():
    try:
        import h5py
        import numpy as np
        import torch
    except ImportError as e:
        fail(f"needs h5py, numpy and PyTorch ({e.name} is missing: apt-get install python3-torch python3-h5py)")
    return h5py, np, torch


def model_class(torch):
    nn = torch.nn

    class Conv1D(nn.Module):
        """GPT-2's linear layer: weight [in, out], y = x W + b."""

        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(n_in, n_out))
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x):
            return x @ self.weight + self.bias

    class Attention(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.heads, self.width = c["n_head"], c["n_embd"]
            self.c_attn = Conv1D(self.width, 3 * self.width)
            self.c_proj = Conv1D(self.width, self.width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            hs = c // self.heads
            q, k, v = (z.view(b, t, self.heads, hs).transpose(1, 2) for z in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = Conv1D(c["n_embd"], c["n_inner"])
            self.c_proj = Conv1D(c["n_inner"], c["n_embd"])

        def forward(self, x):
            h = self.c_fc(x)
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
            return self.c_proj(h)

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])
            self.attn = Attention(c)
            self.ln_2 = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])
            self.mlp = MLP(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Transformer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
            self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
            self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
            self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1])
            x = self.wte(tokens) + self.wpe(positions)[None]
            for block in self.h:
                x = block(x)
            return self.ln_f(x)

    class GPT2LMHeadModel(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.transformer = Transformer(c)
            self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
            if c["tie_word_embeddings"]:
                self.lm_head.weight = self.transformer.wte.weight

        def forward(self, tokens):
            return self.lm_head(self.transformer(tokens))

    return GPT2LMHeadModel


def read_file(path):
    """(config, {name: numpy array}, parity's tokens and logits or None) of a parity GPT-2 file."""
    h5py, np, torch = imports()
    if not os.path.isfile(path):
        fail(f"{path} does not exist or is not a file")
    try:
        f = h5py.File(path, "r")
    except OSError:
        fail(f"{path} is not an HDF5 file")
    with f:
        if f.attrs.get("schema") != SCHEMA:
            fail(f"{path} is not a {SCHEMA} file (parity state export writes one)")
        config = {k: f.attrs[k].item() if hasattr(f.attrs[k], "item") else f.attrs[k] for k in CONFIG_KEYS if k in f.attrs}
        missing = [k for k in CONFIG_KEYS if k not in config]
        if missing:
            fail(f"{path} lacks the attributes {', '.join(missing)}")
        config = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in config.items()}
        tensors = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("parity/"):
                data = obj[()]
                dtype = obj.attrs["dtype"]
                dtype = dtype.decode() if isinstance(dtype, bytes) else dtype
                tensors[name] = (data.reshape(tuple(obj.attrs["shape"])), dtype)
        f.visititems(visit)
        parity = None
        if "parity/logits" in f:
            parity = (f["parity/tokens"][()].reshape(tuple(f["parity/tokens"].attrs["shape"])),
                      f["parity/logits"][()].reshape(tuple(f["parity/logits"].attrs["shape"])),
                      f["parity/logits"].attrs["dtype_computed"])
    return config, tensors, parity


def to_torch_tensor(torch, array, dtype):
    import numpy as np
    if dtype == "bfloat16":
        return torch.from_numpy(array.astype(np.int16)).view(torch.bfloat16)
    if dtype == "float16":
        return torch.from_numpy(array.astype(np.uint16).view(np.float16))
    return torch.from_numpy(array.copy())


def to_torch(args):
    h5py, np, torch = imports()
    config, tensors, _ = read_file(args.file)
    state = {name: to_torch_tensor(torch, data, dtype) for name, (data, dtype) in sorted(tensors.items())}
    torch.save(state, args.out)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({k: config[k] for k in CONFIG_KEYS}, f, indent=1)
    print(f"{len(state)} tensors to {args.out}")


def load_state(torch, path):
    if not os.path.isfile(path):
        fail(f"{path} does not exist or is not a file")
    config_path = os.path.splitext(path)[0] + ".json"
    if not os.path.isfile(config_path):
        fail(f"{config_path} (the model's GPT2Config) does not exist beside {path}")
    try:
        state = torch.load(path, map_location="cpu")
    except Exception as e:  # a damaged or foreign file
        fail(f"{path} cannot be read as a PyTorch state_dict ({type(e).__name__})")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        fail(f"{path} is not a state_dict (names to tensors)")
    with open(config_path) as f:
        config = json.load(f)
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        fail(f"{config_path} lacks {', '.join(missing)}")
    return config, {k: v for k, v in state.items() if not k.endswith(BUFFERS)}


def from_torch(args):
    h5py, np, torch = imports()
    config, state = load_state(torch, args.pt)
    with h5py.File(args.out + ".tmp", "w") as f:
        f.attrs["schema"] = SCHEMA
        f.attrs["schema_version"] = np.int64(1)
        for k in CONFIG_KEYS:
            v = config[k]
            f.attrs[k] = np.int64(v) if isinstance(v, (bool, int)) else (np.float64(v) if isinstance(v, float) else v)
        for name, tensor in state.items():
            t = tensor.detach().contiguous()
            if t.dtype == torch.bfloat16:
                data, dtype = t.view(torch.int16).numpy().astype(np.uint16), "bfloat16"
            elif t.dtype == torch.float16:
                data, dtype = t.numpy().view(np.uint16), "float16"
            elif t.dtype in (torch.float32, torch.float64):
                data, dtype = t.numpy(), str(t.dtype).replace("torch.", "")
            else:
                fail(f"{args.pt}: {name} is {t.dtype}, not a float type parity trains")
            ds = f.create_dataset(name, data=data.reshape(-1))
            ds.attrs["dtype"] = dtype
            ds.attrs["shape"] = np.array(t.shape, dtype=np.int64)
    os.replace(args.out + ".tmp", args.out)
    print(f"{len(state)} tensors to {args.out}")


def check(args):
    h5py, np, torch = imports()
    _, _, parity = read_file(args.file)
    if parity is None:
        fail(f"{args.file} holds no logits of parity's (export with --tokens 1 or more)")
    tokens, logits, computed = parity
    computed = computed.decode() if isinstance(computed, bytes) else computed
    config, state = load_state(torch, args.pt)
    model = model_class(torch)(config)
    dtype = torch.float64 if computed == "float64" else torch.float32
    model = model.to(dtype)
    try:
        model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    except RuntimeError as e:
        fail(f"{args.pt} does not fit a GPT-2 of {os.path.splitext(args.pt)[0]}.json: {str(e).splitlines()[0]}", 1)
    model.eval()
    with torch.no_grad():
        ours = model(torch.from_numpy(tokens.astype(np.int64))).double().numpy()
    u = 2.0 ** -53 if computed == "float64" else 2.0 ** -24
    longest = max(4 * config["n_embd"], config["n_positions"], config["vocab_size"])
    gamma = longest * u / (1 - longest * u)
    bound = 4 * (28 * config["n_layer"] + 11) * gamma
    error = float(np.linalg.norm(ours - logits) / np.linalg.norm(logits))
    words = (f"PyTorch GPT-2 logits against parity's ({computed}, {tokens.shape[0]} rows): "
             f"relative error {error:.3g}, bound {bound:.3g}")
    if not error <= bound:
        print(f"gpt2_torch: {words}: beyond the bound", file=sys.stderr)
        sys.exit(1)
    print(words)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("to-torch", help="a parity GPT-2 file as a PyTorch state_dict")
    p.add_argument("file")
    p.add_argument("out")
    p.set_defaults(run=to_torch)
    p = sub.add_parser("from-torch", help="a PyTorch state_dict as a parity GPT-2 file")
    p.add_argument("pt")
    p.add_argument("out")
    p.set_defaults(run=from_torch)
    p = sub.add_parser("check", help="PyTorch's logits against parity's")
    p.add_argument("file")
    p.add_argument("pt")
    p.set_defaults(run=check)
    args = ap.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
