#!/usr/bin/python3
"""Trains a parity case (`parity case export`) with PyTorch on several processes and writes the
results file `parity case compare` reads (docs/framework-conformance.md).

  torch_case.py CASE RESULTS [--mode ddp|zero1|tp|pp] [--bug NAME]
  torch_case.py --jobs FILE   one such line of arguments a line (blank lines and # comments
                              skipped), all trained by one process: PyTorch is imported once

The case's layout says how many data-parallel ranks (dp) and accumulation steps to use; this
script starts dp processes on this machine (torch.distributed with gloo) and trains the case's
GPT-2 (bench/gpt2_torch.py's module: GPT2LMHeadModel's names, tied head) in the case's precision:
  ddp    DistributedDataParallel, the accumulation steps under no_sync() but the last;
  zero1  the same with torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO-1: AdamW's state
         sharded over the ranks, gathered to rank 0 at the end with consolidate_state_dict);
  tp     Megatron-style tensor parallelism over the case's tp ranks (dp x tp processes, tp_worker),
         written with torch.distributed; the shards gathered whole for the results file;
  pp     a GPipe pipeline over the case's pp stages, the accumulation steps its micro-batches
         (dp x pp processes, pp_worker), written with torch.distributed.
AdamW has the case's two parameter groups (no weight decay on the names the case lists in
/optimizer no_decay). Each rank's rows are [r B/dp, (r+1) B/dp), its micro-batches consecutive
B/(dp k) rows; a micro-batch's loss is its tokens' mean cross-entropy divided by k, and DDP
averages over the ranks, so the gradient is the global batch's mean.

--bug makes one deliberate mistake of the kind framework trackers report, for the tests that
`parity case compare` must catch and diagnose:
  ddp_sum           the ranks' gradients summed, not averaged (the loss multiplied by dp)
  accumulation_sum  the micro-batches' losses summed, not averaged (not divided by k)
  decay_all         weight decay on every parameter, biases, norms and tables included
  row_bias_reduced  (tp) the row-parallel c_proj biases' gradients summed over the tp ranks as
                    if they were split (every rank holds the whole bias): tp times too large
  row_bias_every_rank  (tp) the row-parallel c_proj biases added by every tp rank before the
                    all-reduce instead of once after it: tp copies in the output
  clip_per_rank     (ddp, a case with --clip-grad-norm) each rank's gradients clipped before the
                    ranks average them, instead of the averaged gradients after
  same_dropout      (ddp, a case with --dropout) every rank applying the first rank's rows of the
                    dropout masks, as a generator seeded alike on every rank draws them
  tied_unsummed     (pp) the tied table's copies on the first and last stage each updated with
                    its own stage's gradient, not their sum
  float32_loss      (ddp, zero1) the logits cast to float32 for the loss in a float64 case

Exit status: 0 written; 2 bad arguments or files (one line).
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import gpt2_torch  # noqa: E402  (the GPT-2 module shared with `parity state`'s interchange)

PROG = "torch_case.py"
BUGS = ("ddp_sum", "accumulation_sum", "decay_all", "row_bias_reduced", "row_bias_every_rank", "clip_per_rank",
        "same_dropout", "tied_unsummed", "float32_loss")


def fail(message, status=2):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(status)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def read_case(path):
    """The case's attributes, initial tensors (by GPT-2 name) and batches, as numpy arrays."""
    import h5py
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path}: not a readable case file ({e})")
    with f:
        if text(f.attrs.get("schema", "")) != "parity-case":
            fail(f"{path}: not a parity case file (schema {text(f.attrs.get('schema', 'none'))})")
        attrs = {k: (text(v) if isinstance(v, (bytes, str)) else v) for k, v in f.attrs.items()}
        layout = {k: int(v) for k, v in f["layout"].attrs.items()}
        optimizer = {k: v for k, v in f["optimizer"].attrs.items()}
        optimizer["no_decay"] = [text(n) for n in optimizer["no_decay"]]
        init = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                init[name] = obj[()].reshape(tuple(obj.attrs["shape"]))
        f["init"].visititems(visit)
        batches = []
        for step in range(int(attrs["steps"])):
            g = f[f"batches/{step}"]
            masks = {}
            if "dropout" in g:  # keep masks [B, T, C] of each block's two residual dropouts
                for name, ds in g["dropout"].items():
                    masks[name] = ds[()].reshape(tuple(ds.attrs["shape"]))
            batches.append((g["tokens"][()].reshape(tuple(g["tokens"].attrs["shape"])),
                            g["targets"][()].reshape(tuple(g["targets"].attrs["shape"])), masks))
    return attrs, layout, optimizer, init, batches


def gpt2(attrs, init, dtype):
    """bench/gpt2_torch.py's GPT-2 with the case's initial parameters, and `current`: the dropout
    masks (by module, "transformer.h.0.attn") its blocks' attention and MLP outputs are multiplied
    by, set for the micro-batch running (none: no dropout)."""
    import torch
    config = {k: (int(attrs[k]) if k != "layer_norm_epsilon" else float(attrs[k]))
              for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "layer_norm_epsilon",
                        "tie_word_embeddings")}
    # GPT-2's epsilon (nn.LayerNorm's default), not the file's: an epsilon of parity's that differs
    # must show as a difference in the comparison, not be copied into this side.
    config["layer_norm_epsilon"] = 1e-5
    model = gpt2_torch.model_class(torch)(config).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():  # the tied head is the table: listed once
            p.copy_(torch.from_numpy(init[name]).to(dtype))
    current = {}
    for i, block in enumerate(model.transformer.h):
        for site in ("attn", "mlp"):
            getattr(block, site).register_forward_hook(
                lambda module, inputs, output, key=f"transformer.h.{i}.{site}": output * current[key]
                if key in current else output)
    return model, current


def scaled_masks(torch, masks, rows, p_drop, dtype):
    """The masks' rows as the multipliers dropout applies (1 / (1 - p) kept, 0 dropped)."""
    return {name: torch.from_numpy(mask[rows]).to(dtype) / (1 - p_drop) for name, mask in masks.items()}


def adamw_groups(params, opt, bug=None):
    """The case's two parameter groups over `params` ({name: parameter}), AdamW's other settings,
    and the names in the optimizer's index order (its state_dict's keys); the bug decay_all puts
    every parameter in the decayed group."""
    decayed = [n for n in params if n not in opt["no_decay"]]
    spared = [n for n in params if n in opt["no_decay"]]
    wd = float(opt["weight_decay"])
    groups = ([{"params": [params[n] for n in decayed + spared], "weight_decay": wd}] if bug == "decay_all" else
              [{"params": [params[n] for n in decayed], "weight_decay": wd},
               {"params": [params[n] for n in spared], "weight_decay": 0.0}])
    hyper = dict(lr=float(opt["lr"]), betas=(float(opt["beta1"]), float(opt["beta2"])), eps=float(opt["eps"]))
    return groups, hyper, decayed + spared


def worker(rank, world, rendezvous, case_path, results, mode, bug):
    import numpy as np
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    torch.manual_seed(0)
    attrs, layout, opt, init, batches = read_case(case_path)
    dtype = torch.float64 if attrs["precision"] == "float64" else torch.float32
    model, current = gpt2(attrs, init, dtype)
    names = dict(model.named_parameters())
    groups, hyper, order = adamw_groups(names, opt, bug)
    p_drop = float(attrs["dropout"])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        optimizer = ZeroRedundancyOptimizer(groups[0]["params"], optimizer_class=torch.optim.AdamW,
                                            weight_decay=groups[0]["weight_decay"], **hyper)
        for group in groups[1:]:
            optimizer.add_param_group(group)
    else:
        optimizer = torch.optim.AdamW(groups, **hyper)
    dp, k = layout["dp"], layout["accumulation"]
    clip = float(opt.get("clip_grad_norm", 0.0))
    rows = batches[0][0].shape[0] // dp
    micro = rows // k
    losses, first_gradients = [], None
    for step, (tokens, targets, masks) in enumerate(batches):
        optimizer.zero_grad(set_to_none=False)
        mine = slice(rank * rows, (rank + 1) * rows)
        local = 0.0
        for j in range(k):
            part = slice(mine.start + j * micro, mine.start + (j + 1) * micro)
            drawn = slice(j * micro, (j + 1) * micro) if bug == "same_dropout" else part
            current.clear()
            current.update(scaled_masks(torch, masks, drawn, p_drop, dtype))
            x = torch.from_numpy(tokens[part].astype(np.int64))
            y = torch.from_numpy(targets[part].astype(np.int64))
            # clip_per_rank clips before any reduction, so it reduces by hand after the last one.
            context = ddp.no_sync() if j < k - 1 or bug == "clip_per_rank" else _nothing()
            with context:
                with compute(attrs):
                    logits = ddp(x).to(torch.float32 if bug == "float32_loss" else dtype)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                local += loss.item() / k
                scaled = loss if bug == "accumulation_sum" else loss / k
                if bug == "ddp_sum":
                    scaled = scaled * dp
                scaled.backward()
        if clip > 0 and bug == "clip_per_rank":
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dp
        elif clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        total = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(total.item() / dp)
        if step == 0:
            first_gradients = {n: p.grad.detach().to(torch.float64).numpy().copy() for n, p in names.items()}
        optimizer.step()
    if mode == "zero1":
        optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        state = optimizer.state_dict()
        by_index = state["state"]
        moments = {}
        for index, name in enumerate(order):
            s = by_index[index]
            moments[name] = (s["exp_avg"].to(torch.float64).numpy(), s["exp_avg_sq"].to(torch.float64).numpy())
        write_results(results, attrs["case_id"], losses, first_gradients,
                      {n: p.detach().to(torch.float64).numpy() for n, p in names.items()}, moments)
    dist.barrier()
    dist.destroy_process_group()


def grid_start(rank, world, rendezvous, case_path, axis):
    """torch.distributed up (gloo), the case read, and the grid: `axis` (tp or pp) over consecutive
    ranks, dp over the rest. Returns the case, its torch dtype and (this rank's place on the axis,
    its replica, every replica's group along the axis, its dp group)."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    attrs, layout, opt, init, batches = read_case(case_path)
    dtype = torch.float64 if attrs["precision"] == "float64" else torch.float32
    n, dp = layout[axis], layout["dp"]
    groups = [dist.new_group(list(range(d * n, (d + 1) * n))) for d in range(dp)]
    dp_groups = [dist.new_group(list(range(j, world, n))) for j in range(n)]
    return attrs, layout, opt, init, batches, dtype, (rank % n, rank // n, groups, dp_groups[rank % n])


def tp_indices(name, c, r, t):
    """(axis, indices) of tensor-parallel rank r's shard of parameter `name` (Megatron's splits:
    c_attn and c_fc by columns, a head's q, k and v together; the projections c_proj by rows),
    or None for a parameter every rank holds whole."""
    import numpy as np
    if name.endswith("attn.c_attn.weight") or name.endswith("attn.c_attn.bias"):
        w = c // t
        return (name.endswith("weight") and 1 or 0,
                np.concatenate([np.arange(part * c + r * w, part * c + (r + 1) * w) for part in range(3)]))
    if name.endswith("mlp.c_fc.weight") or name.endswith("mlp.c_fc.bias"):
        w = 4 * c // t
        return (name.endswith("weight") and 1 or 0, np.arange(r * w, (r + 1) * w))
    if name.endswith("attn.c_proj.weight"):
        return 0, np.arange(r * (c // t), (r + 1) * (c // t))
    if name.endswith("mlp.c_proj.weight"):
        return 0, np.arange(r * (4 * c // t), (r + 1) * (4 * c // t))
    return None


def tp_worker(rank, world, rendezvous, case_path, results, mode, bug):
    """Megatron-style tensor parallelism written with torch.distributed: tp ranks of each dp
    replica (consecutive ranks) hold the column- and row-parallel shards, the activations pass
    through f (identity forward, all-reduce backward) into and g (all-reduce forward, identity
    backward) out of each parallel region, the row-parallel bias is added once after g; the
    replicas average their gradients with an all-reduce."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    attrs, layout, opt, init, batches, dtype, (tp_rank, replica, tp_groups, dp_group) = grid_start(
        rank, world, rendezvous, case_path, "tp")
    t, dp, k = layout["tp"], layout["dp"], layout["accumulation"]
    tp_group = tp_groups[replica]
    c, heads, eps = int(attrs["n_embd"]), int(attrs["n_head"]), float(attrs["layer_norm_epsilon"])
    layers = int(attrs["n_layer"])

    class CopyToRegion(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, dy):
            dy = dy.clone()
            dist.all_reduce(dy, group=tp_group)
            return dy

    class ReduceFromRegion(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x, group=tp_group)
            return x

        @staticmethod
        def backward(ctx, dy):
            return dy

    params = {}
    for name, value in init.items():
        shard = tp_indices(name, c, tp_rank, t)
        local = value if shard is None else np.take(value, shard[1], axis=shard[0])
        params[name] = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(local)).to(dtype))
    P = params

    p_drop = float(attrs["dropout"])

    def row_parallel(x, weight, bias):
        """x W summed over tp, then the whole bias once (the bug: on every rank, before the sum)."""
        if bug == "row_bias_every_rank":
            return ReduceFromRegion.apply(x @ weight + bias)
        return ReduceFromRegion.apply(x @ weight) + bias

    def forward(tokens, masks):
        """masks: the micro-batch's rows of the case's keep masks, by module (none: no dropout)."""
        def drop(y, key):
            return y * (torch.from_numpy(masks[key]).to(dtype) / (1 - p_drop)) if key in masks else y
        x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][: tokens.shape[1]][None]
        b, s = tokens.shape
        local_heads, hs = heads // t, c // heads
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        for i in range(layers):
            h = f"transformer.h.{i}."
            y = F.layer_norm(x, (c,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], eps)
            qkv = CopyToRegion.apply(y) @ P[h + "attn.c_attn.weight"] + P[h + "attn.c_attn.bias"]
            q, kk, v = (z.reshape(b, s, local_heads, hs).transpose(1, 2) for z in qkv.split(c // t, dim=2))
            scores = (q @ kk.transpose(-2, -1)) / np.sqrt(hs)
            o = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
            o = o.transpose(1, 2).reshape(b, s, c // t)
            x = x + drop(row_parallel(o, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"]), h + "attn")
            y = F.layer_norm(x, (c,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], eps)
            m = CopyToRegion.apply(y) @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"]
            m = 0.5 * m * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (m + 0.044715 * m ** 3)))
            x = x + drop(row_parallel(m, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"]), h + "mlp")
        x = F.layer_norm(x, (c,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
        return x @ P["transformer.wte.weight"].t()

    groups, hyper, order = adamw_groups(params, opt)
    optimizer = torch.optim.AdamW(groups, **hyper)
    rows = batches[0][0].shape[0] // dp
    micro = rows // k
    losses, first_gradients = [], None
    for step, (tokens, targets, masks) in enumerate(batches):
        optimizer.zero_grad(set_to_none=False)
        local = 0.0
        for j in range(k):
            part = slice(replica * rows + j * micro, replica * rows + (j + 1) * micro)
            with compute(attrs):
                logits = forward(torch.from_numpy(tokens[part].astype(np.int64)), {n: m[part] for n, m in masks.items()})
            logits = logits.to(dtype)
            y = torch.from_numpy(targets[part].astype(np.int64))
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            local += loss.item() / k
            (loss / k).backward()
        for name, p in params.items():
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= dp
            if bug == "row_bias_reduced" and name.endswith("c_proj.bias"):
                dist.all_reduce(p.grad, group=tp_group)  # as if it were split over tp: t copies summed
        clip = float(opt.get("clip_grad_norm", 0.0))
        if clip > 0:  # the norm of the whole gradients: the shards' squares summed over tp, the rest once
            sharded = torch.zeros(1, dtype=torch.float64)
            whole = torch.zeros(1, dtype=torch.float64)
            for name, p in params.items():
                (whole if tp_indices(name, c, tp_rank, t) is None else sharded).add_((p.grad.double() ** 2).sum())
            dist.all_reduce(sharded, group=tp_group)
            coefficient = min(1.0, clip / (float((sharded + whole).sqrt()) + 1e-6))
            for p in params.values():
                p.grad *= coefficient
        total = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(total.item() / world)
        if step == 0:
            first_gradients = {n: p.grad.detach().clone() for n, p in params.items()}
        optimizer.step()

    def whole(name, local):
        """The whole tensor from the tp ranks' shards (every rank calls it)."""
        local = local.detach().to(torch.float64).contiguous()
        shard = tp_indices(name, c, tp_rank, t)
        if shard is None:
            return local.numpy()
        parts = [torch.empty_like(local) for _ in range(t)]
        dist.all_gather(parts, local, group=tp_group)
        axis = shard[0]
        full = np.zeros(init[name].shape)
        for r, part in enumerate(parts):
            index = [slice(None)] * full.ndim
            index[axis] = tp_indices(name, c, r, t)[1]
            full[tuple(index)] = part.numpy()
        return full

    state = optimizer.state_dict()["state"]
    out = {n: (whole(n, first_gradients[n]), whole(n, P[n]), whole(n, state[order.index(n)]["exp_avg"]),
               whole(n, state[order.index(n)]["exp_avg_sq"])) for n in params}
    if rank == 0:
        write_results(results, attrs["case_id"], losses, {n: v[0] for n, v in out.items()},
                      {n: v[1] for n, v in out.items()}, {n: (v[2], v[3]) for n, v in out.items()})
    dist.barrier()
    dist.destroy_process_group()


def pp_worker(rank, world, rendezvous, case_path, results, mode, bug):
    """A pipeline written with torch.distributed: pp stages of consecutive blocks (the first with
    the embeddings, the last with the final LayerNorm and a copy of the tied table as the head),
    GPipe's order (every micro-batch's forward, then their backwards in reverse), activations and
    their gradients sent between stages; the two table copies' gradients summed, the dp replicas
    averaging with an all-reduce."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    attrs, layout, opt, init, batches, dtype, (stage, replica, pp_groups, dp_group) = grid_start(
        rank, world, rendezvous, case_path, "pp")
    pp, dp, k = layout["pp"], layout["dp"], layout["accumulation"]
    tied_groups = [dist.new_group([d * pp, d * pp + pp - 1]) for d in range(dp)] if pp > 1 else []
    pp_group = pp_groups[replica]
    c, eps, layers = int(attrs["n_embd"]), float(attrs["layer_norm_epsilon"]), int(attrs["n_layer"])
    mine = range(stage * layers // pp, (stage + 1) * layers // pp)
    first, last = stage == 0, stage == pp - 1

    def held(name):
        if name.startswith("transformer.h."):
            return int(name.split(".")[2]) in mine
        if name in ("transformer.wte.weight",):
            return first or last
        return first if name == "transformer.wpe.weight" else last  # ln_f
    # The whole GPT-2 on every stage, of which it uses (and updates) the blocks and ends it holds.
    model, current = gpt2(attrs, init, dtype)
    P = {n: p for n, p in model.named_parameters() if held(n)}
    p_drop = float(attrs["dropout"])
    names = list(P)
    groups, hyper, order = adamw_groups(P, opt)
    optimizer = torch.optim.AdamW(groups, **hyper)
    rows = batches[0][0].shape[0] // dp
    micro = rows // k
    s_len = batches[0][0].shape[1]
    losses, first_gradients = [], None
    previous, following = rank - 1, rank + 1
    for step, (tokens, targets, masks) in enumerate(batches):
        optimizer.zero_grad(set_to_none=False)
        kept, local = [], 0.0
        for j in range(k):  # forwards
            part = slice(replica * rows + j * micro, replica * rows + (j + 1) * micro)
            current.clear()
            current.update(scaled_masks(torch, masks, part, p_drop, dtype))
            if first:
                t = torch.from_numpy(tokens[part].astype(np.int64))
                x_in = None
                x = P["transformer.wte.weight"][t] + P["transformer.wpe.weight"][:s_len][None]
            else:
                x_in = torch.empty(micro, s_len, c, dtype=dtype)
                dist.recv(x_in, previous)
                x_in.requires_grad_(True)
                x = x_in
            with compute(attrs):
                for i in mine:
                    x = model.transformer.h[i](x)
                if last:
                    x = F.layer_norm(x, (c,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
                    logits = (x @ P["transformer.wte.weight"].t()).to(dtype)
            x = x.to(dtype)  # what passes between stages: the parameters' type
            if last:
                y = torch.from_numpy(targets[part].astype(np.int64))
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)) / k
                local += loss.item()
                kept.append((x_in, loss))
            else:
                dist.send(x.detach().contiguous(), following)
                kept.append((x_in, x))
        for x_in, out in reversed(kept):  # backwards, in reverse
            if last:
                out.backward()
            else:
                grad = torch.empty_like(out)
                dist.recv(grad, following)
                out.backward(grad)
            if x_in is not None:
                dist.send(x_in.grad.contiguous(), previous)
        if pp > 1 and bug != "tied_unsummed" and (first or last):
            dist.all_reduce(P["transformer.wte.weight"].grad, group=tied_groups[replica])
        for p in P.values():
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= dp
        clip = float(opt.get("clip_grad_norm", 0.0))
        if clip > 0:  # the whole gradients' norm: every stage's squares, the table's copy once
            squares = torch.zeros(1, dtype=torch.float64)
            for n, p in P.items():
                if not (n == "transformer.wte.weight" and last and not first):
                    squares += (p.grad.double() ** 2).sum()
            dist.all_reduce(squares, group=pp_group)
            coefficient = min(1.0, clip / (float(squares.sqrt()) + 1e-6))
            for p in P.values():
                p.grad *= coefficient
        total = torch.tensor([local if last else 0.0], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(total.item() / dp)
        if step == 0:
            first_gradients = {n: p.grad.detach().to(torch.float64).numpy().copy() for n, p in P.items()}
        optimizer.step()
    state = optimizer.state_dict()["state"]
    mine_out = {n: (first_gradients[n], P[n].detach().to(torch.float64).numpy(),
                    state[order.index(n)]["exp_avg"].to(torch.float64).numpy(),
                    state[order.index(n)]["exp_avg_sq"].to(torch.float64).numpy())
                for n in names if not (n == "transformer.wte.weight" and not first)}
    gathered = [None] * pp if rank == 0 else None
    dist.gather_object(mine_out, gathered, dst=0, group=pp_groups[0]) if replica == 0 else None
    if rank == 0:
        out = {n: v for part in gathered for n, v in part.items()}
        write_results(results, attrs["case_id"], losses, {n: v[0] for n, v in out.items()},
                      {n: v[1] for n, v in out.items()}, {n: (v[2], v[3]) for n, v in out.items()})
    dist.barrier()
    dist.destroy_process_group()


def compute(attrs):
    """bfloat16 cases: the forward under CPU autocast (float32 parameters and optimizer, bfloat16
    products); otherwise in the parameters' type."""
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16) if attrs["precision"] == "bfloat16" else _nothing()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def write_results(path, case_id, losses, gradients, parameters, moments):
    import h5py
    import numpy as np
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        f.attrs["schema"] = "parity-case-results"
        f.attrs["schema_version"] = np.int64(1)
        f.attrs["case_id"] = case_id
        f.attrs["framework"] = "PyTorch"

        def put(at, array):
            ds = f.create_dataset(at, data=np.ascontiguousarray(array, dtype=np.float64).reshape(-1))
            ds.attrs["dtype"] = "float64"
            ds.attrs["shape"] = np.array(np.shape(array), dtype=np.int64)
        put("loss", np.array(losses))
        for name in parameters:
            put(f"gradients/{name}", gradients[name])
            put(f"parameters/{name}", parameters[name])
            put(f"optimizer/{name}/exp_avg", moments[name][0])
            put(f"optimizer/{name}/exp_avg_sq", moments[name][1])
    os.replace(tmp, path)


def run_jobs(path):
    """--jobs FILE: each line's arguments trained as main would, in this process."""
    import shlex
    try:
        with open(path) as f:
            lines = [line.strip() for line in f]
    except OSError as e:
        fail(f"--jobs {path}: {e.strerror}")
    jobs = [shlex.split(line) for line in lines if line and not line.startswith("#")]
    if not jobs:
        fail(f"--jobs {path}: no job in the file")
    for job in jobs:
        if "--jobs" in job:
            fail(f"--jobs {path}: a job line may not name --jobs ({' '.join(job)})")
        main(job)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--jobs":
        return run_jobs(argv[1])
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("case", help="the case file (parity case export)")
    p.add_argument("results", help="the results file to write")
    p.add_argument("--mode", choices=("ddp", "zero1", "tp", "pp"), default="ddp",
                   help="how the ranks share the work, as the case's layout says (default ddp)")
    p.add_argument("--bug", choices=BUGS, help="make one deliberate mistake (for the tests)")
    args = p.parse_args(argv)
    try:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        fail(f"needs h5py, numpy and PyTorch ({e.name} is missing: apt-get install python3-torch python3-h5py)")
    attrs, layout, opt, _, _ = read_case(args.case)
    tp, pp, zero = layout.get("tp", 1), layout.get("pp", 1), layout.get("zero", 0)
    if zero > 1 or sum(x > 1 for x in (tp, pp, zero + 1 if zero else 1)) > 1:
        fail(f"{args.case}: ZeRO stage {zero}, tp {tp} and pp {pp}; this adapter runs one of ZeRO-1, tp and pp "
             "beside dp")
    want = "tp" if tp > 1 else "pp" if pp > 1 else "zero1" if zero == 1 else "ddp"
    if args.mode != want:
        fail(f"{args.case}: the case's layout (dp {layout['dp']}, ZeRO {layout.get('zero', 0)}, tp "
             f"{layout.get('tp', 1)}) is --mode {want}, not {args.mode}")
    if args.bug in ("row_bias_reduced", "row_bias_every_rank") and args.mode != "tp":
        fail(f"--bug {args.bug} needs a tensor-parallel case (--mode tp)")
    if args.bug == "same_dropout" and (args.mode != "ddp" or not float(attrs["dropout"]) > 0):
        fail("--bug same_dropout needs --mode ddp and a case with dropout (parity case export --dropout)")
    if args.bug == "clip_per_rank" and (args.mode != "ddp" or not float(opt.get("clip_grad_norm", 0.0)) > 0):
        fail("--bug clip_per_rank needs --mode ddp and a case that clips (parity case export --clip-grad-norm)")
    torch.set_num_threads(1)
    if args.bug == "float32_loss" and (args.mode not in ("ddp", "zero1") or attrs["precision"] != "float64"):
        fail("--bug float32_loss needs a float64 case in --mode ddp or zero1")
    if args.bug == "tied_unsummed" and args.mode != "pp":
        fail("--bug tied_unsummed needs a pipeline case (--mode pp)")
    world = layout["dp"] * tp * pp
    with tempfile.TemporaryDirectory() as tmp:
        # Forked, not spawned: the workers start with torch already imported.
        mp.start_processes({"tp": tp_worker, "pp": pp_worker}.get(args.mode, worker),
                           args=(world, os.path.join(tmp, "rendezvous"), args.case, args.results, args.mode, args.bug),
                           nprocs=world, join=True, start_method="fork")
    print(f"{PROG}: case {attrs['case_id']} trained with PyTorch {torch.__version__} ({args.mode}"
          f"{', bug ' + args.bug if args.bug else ''}) -> {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
