"""Trains a small pre-norm transformer MLP block built from epifuse.nn on synthetic
data across the GPUs of one host, with DDP (default) or FSDP2 (`--fsdp`):

    torchrun --nproc_per_node=2 examples/python/train_ddp.py [--fsdp] [--steps 50]

Each rank draws its own slice of one global batch per step. With `--check`, the first
step runs without dropout and rank 0 compares every parameter's gradient after the
all-reduce (DDP) or reduce-scatter (FSDP2) with a single-process run of the same model
on the whole global batch; the script exits 1 when one differs by more than float32
summation order allows (1e-5 relative to the gradient's largest entry).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import epifuse.nn as enn


class Block(torch.nn.Module):
    """y = x + MLP(LayerNorm(x)), the MLP's two GEMMs with epilogues from epifuse."""

    def __init__(self, hidden, ffn, dropout):
        super().__init__()
        self.norm = enn.LayerNorm(hidden)
        self.mlp = enn.MLP(hidden, ffn, activation="gelu_tanh", dropout=dropout)

    def forward(self, x):
        h = self.norm(x)
        return x - h + self.mlp(h)  # mlp(h) = h + fc2(...): the block's residual is x


def batch(step, global_batch, hidden, device):
    g = torch.Generator(device="cpu").manual_seed(1000 + step)
    x = torch.randn(global_batch, hidden, generator=g)
    target = torch.sin(x) + 0.1 * torch.randn(global_batch, hidden, generator=g)
    return x.to(device), target.to(device)


def loss_of(model, x, target):
    return torch.nn.functional.mse_loss(model(x), target)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=512, help="global batch (tokens), split across ranks")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--check", action="store_true", help="compare step 1's gradients with one process")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    device = torch.device("cuda", torch.cuda.current_device())
    if args.batch % world:
        sys.exit(f"--batch {args.batch} does not split across {world} ranks")
    local = args.batch // world

    torch.manual_seed(0)  # the same initial weights on every rank
    model = Block(args.hidden, args.ffn, args.dropout).to(device)
    reference = None
    if args.check and rank == 0:
        reference = Block(args.hidden, args.ffn, 0.0).to(device)
        reference.load_state_dict(model.state_dict())
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        fully_shard(model.mlp)
        fully_shard(model)
        wrapped = model
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)

    status = 0
    for step in range(args.steps):
        x, target = batch(step, args.batch, args.hidden, device)
        mine = slice(rank * local, (rank + 1) * local)
        check = args.check and step == 0
        if check:
            wrapped.eval()  # no dropout: the single-process run must see the same function
        loss = loss_of(wrapped, x[mine], target[mine])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if check:
            wrapped.train()
            status = compare(model, reference, x, target, rank, args.fsdp)
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {loss.item():.5f}  ({'FSDP2' if args.fsdp else 'DDP'}, {world} GPUs)",
                  flush=True)
    dist.destroy_process_group()
    sys.exit(status)


def compare(model, reference, x, target, rank, fsdp):
    """Rank 0: the distributed gradients against one process on the whole batch."""
    grads = {}
    for name, p in model.named_parameters():
        g = p.grad
        if fsdp:
            g = g.full_tensor()  # a DTensor shard: gathered on every rank
        grads[name] = g
    if rank != 0:
        return 0
    reference.eval()
    loss_of(reference, x, target).backward()
    worst = 0.0
    for name, p in reference.named_parameters():
        err = ((grads[name] - p.grad).abs().max() / p.grad.abs().max().clamp_min(1e-30)).item()
        worst = max(worst, err)
        print(f"  {name:16s} max |grad - single| / max |single| = {err:.2e}")
    ok = worst <= 1e-5
    print(f"{'FSDP2' if fsdp else 'DDP'} gradients {'equal' if ok else 'DIFFER FROM'} the single-process run "
          f"(worst {worst:.2e}, bound 1e-5)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    main()
