#!/usr/bin/env python3
"""The peer of bench/train: one training step of a Mamba-2 model in PyTorch on
the CPU, the step bench/train times (forward over one sequence of T tokens,
next-token cross-entropy over the padded vocabulary, backward, AdamW with
beta (0.9, 0.95), eps 1e-8, weight decay 0.1), on a random model of the same
shape (tied embedding, ngroups 1, d_conv 4, expand 2, vocab --vocab, default
50277, padded to a multiple of --pad-multiple, default 16: 50288), f32,
torch.set_num_threads(THREADS).

The mixer is written out in plain torch: the scan is the SSD quadratic form
of the whole sequence (one chunk of T, what transformers' torch path does per
chunk of 256), causal depthwise conv1d, gated grouped RMSNorm with
norm_before_gate=False. Not part of the product: run by bench/train when a
python3 with torch is found.

Prints one line: "tokens/s X" (T / the median time of --rounds timed steps
after one warm-up step), or "skipped: WHY".

usage: train_torch.py --d-model D --n-layer L --d-state N --headdim P
                      [--tokens T] [--threads N] [--rounds R]
ref: mamba_ssm modules/mamba2.py, ops/triton/ssd_combined.py (the math);
     transformers models/mamba2/modeling_mamba2.py torch_forward.
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--d-state", type=int, required=True)
    ap.add_argument("--headdim", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=50277)
    ap.add_argument("--pad-multiple", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # the peer is optional
        print(f"skipped: cannot import torch: {e}")
        return 0
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    d, L, N, P, T = a.d_model, a.n_layer, a.d_state, a.headdim, a.tokens
    vocab, K, G = a.vocab, 4, 1
    Vp = -(-vocab // a.pad_multiple) * a.pad_multiple
    di = 2 * d
    H = di // P
    conv_dim = di + 2 * G * N
    d_in_proj = 2 * di + 2 * G * N + H
    eps = 1e-5

    def p(*shape, scale=0.02, init=None):
        t = torch.empty(*shape)
        if init is None:
            t.normal_(0, scale)
        else:
            t.copy_(init)
        return torch.nn.Parameter(t)

    params = {"emb": p(Vp, d), "norm_f": p(d, init=torch.ones(d))}
    layers = []
    for _ in range(L):
        dt = torch.exp(torch.empty(H).uniform_(torch.log(torch.tensor(1e-3)), torch.log(torch.tensor(0.1))))
        layers.append({
            "norm": p(d, init=torch.ones(d)),
            "in_proj": p(d_in_proj, d, scale=d ** -0.5),
            "conv_w": p(conv_dim, 1, K, init=torch.empty(conv_dim, 1, K).uniform_(-0.5, 0.5)),
            "conv_b": p(conv_dim, init=torch.empty(conv_dim).uniform_(-0.1, 0.1)),
            "dt_bias": p(H, init=dt + torch.log(-torch.expm1(-dt))),
            "A_log": p(H, init=torch.log(torch.empty(H).uniform_(1, 16))),
            "D": p(H, init=torch.ones(H)),
            "gnorm": p(di, init=torch.ones(di)),
            "out_proj": p(d, di, scale=di ** -0.5),
        })
    allp = list(params.values()) + [v for l in layers for v in l.values()]
    opt = torch.optim.AdamW(allp, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    n_params = sum(x.numel() for x in allp)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))

    def mixer(u, l):
        zxbcdt = u @ l["in_proj"].t()
        z, xbc, dt = torch.split(zxbcdt, [di, conv_dim, H], dim=-1)
        xbc = F.conv1d(xbc.t().unsqueeze(0), l["conv_w"], l["conv_b"], padding=K - 1,
                       groups=conv_dim)[0, :, :T].t()
        xbc = F.silu(xbc)
        x, B, C = torch.split(xbc, [di, G * N, G * N], dim=-1)
        x = x.view(T, H, P)
        dt = F.softplus(dt + l["dt_bias"])          # [T, H]
        A = -torch.exp(l["A_log"])                   # [H]
        cs = torch.cumsum(dt * A, dim=0)             # [T, H]
        seg = cs.t().unsqueeze(2) - cs.t().unsqueeze(1)  # [H, t, s]
        Lm = torch.exp(seg.masked_fill(~mask, float("-inf")))
        CB = C @ B.t()                               # [t, s] (one group)
        W = Lm * CB.unsqueeze(0) * dt.t().unsqueeze(1)   # [H, t, s]
        y = torch.einsum("hts,shp->thp", W, x) + l["D"].view(1, H, 1) * x
        y = y.reshape(T, di) * F.silu(z)
        y = rms(y.view(T, G, di // G), l["gnorm"].view(G, di // G)).reshape(T, di)
        return y @ l["out_proj"].t()

    g = torch.Generator().manual_seed(2)
    tok = torch.randint(0, vocab, (T + 1,), generator=g)

    def step():
        h = params["emb"][tok[:T]]
        for l in layers:
            h = h + mixer(rms(h, l["norm"]), l)
        logits = rms(h, params["norm_f"]) @ params["emb"].t()
        loss = F.cross_entropy(logits, tok[1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    step()  # warm-up
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(f"tokens/s {T / statistics.median(times):.1f} params {n_params} torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
