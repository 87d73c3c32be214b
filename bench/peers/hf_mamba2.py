#!/usr/bin/env python3
"""The peer figures for bench/gpu.sh: transformers' Mamba2 on the same GPU,
model directory (written by gen/mkmodel, transformers layout) and shapes.

Not part of the product: run only when torch (with CUDA) and transformers
import. Prints lines in the format of bench/cuda:
  encode D docs x N tokens: T tokens/s       (forward with use_cache, no lm_head use)
  decode batch B, S steps: T tokens/s        (greedy generate, fixed length)
and whether transformers found the fused kernels (mamba_ssm, causal_conv1d);
without them it runs its slow torch path, which is the figure of record then.

usage: hf_mamba2.py MODEL_DIR [--docs D] [--tokens N] [--per-call B]
                    [--batches 1,64] [--steps S] [--dtype bf16]
ref: transformers models/mamba2/modeling_mamba2.py
"""
import argparse
import sys
import time


def state_tensors(obj, depth=0):
    """Every tensor a transformers cache holds (the conv and SSM states of each
    layer), wherever its version keeps them: Mamba2Cache's conv_states and
    ssm_states (transformers 4.x) or a DynamicCache's layers (5.x)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth > 3 or obj is None or isinstance(obj, (int, float, str, bool)):
        return []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return []
    out = []
    for v in items:
        out += state_tensors(v, depth + 1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--per-call", type=int, default=16)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--dtype", default="bf16")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import Mamba2ForCausalLM
    except Exception as e:  # the peer is optional
        print(f"hf: skipped, cannot import torch/transformers: {e}")
        return 0
    if not torch.cuda.is_available():
        print("hf: skipped, torch sees no GPU")
        return 0
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    try:
        from transformers.models.mamba2 import modeling_mamba2 as mm
        fast = bool(getattr(mm, "is_fast_path_available", False))
    except Exception:
        fast = False
    print(f"hf: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"fused kernels {'yes' if fast else 'no (slow torch path)'}")
    try:  # transformers >= 4.56 names it dtype; older ones torch_dtype
        model = Mamba2ForCausalLM.from_pretrained(a.model, dtype=dt)
    except TypeError:
        model = Mamba2ForCausalLM.from_pretrained(a.model, torch_dtype=dt)
    model = model.cuda().eval()
    vocab = model.config.vocab_size
    g = torch.Generator(device="cpu").manual_seed(1)

    def sync():
        torch.cuda.synchronize()

    with torch.inference_mode():
        ids = torch.randint(0, min(vocab, 50000), (a.per_call, a.tokens), generator=g).cuda()
        model.backbone(input_ids=ids[:1], use_cache=True)  # warm-up
        sync()
        best = 0.0
        said = False
        for _ in range(2):
            t0 = time.perf_counter()
            done = 0
            while done < a.docs:
                k = min(a.per_call, a.docs - done)
                out = model.backbone(input_ids=ids[:k], use_cache=True)
                # the states, to the host as ss-encode does
                states = state_tensors(out.cache_params)
                if not states:
                    raise RuntimeError(f"no state tensors in {type(out.cache_params).__name__}")
                if not said:
                    said = True
                    print(f"hf: {type(out.cache_params).__name__} holds {len(states)} tensors, "
                          f"{sum(t.numel() * 4 for t in states) / k / 1e6:.1f} MB a document as f32")
                for t in states:
                    t.float().cpu()
                done += k
            sync()
            best = max(best, a.docs * a.tokens / (time.perf_counter() - t0))
        print(f"hf encode {a.docs} docs x {a.tokens} tokens, {a.per_call} per call: {best:.0f} tokens/s")
        for b in [int(x) for x in a.batches.split(",") if x]:
            prompt = torch.randint(0, min(vocab, 50000), (b, 1), generator=g).cuda()
            kw = dict(max_new_tokens=a.steps, min_new_tokens=a.steps, do_sample=False,
                      pad_token_id=0, eos_token_id=None)
            try:
                model.generate(prompt, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})
                sync()
                t0 = time.perf_counter()
                model.generate(prompt, **kw)
                sync()
            except torch.OutOfMemoryError as e:
                # the slow torch path's prefill of a batch can ask for more than the GPU has
                # (2.7b at batch 64 asked an H200 for 160 GiB)
                print(f"hf decode batch {b}: out of GPU memory ({str(e).splitlines()[0]})")
                torch.cuda.empty_cache()
                continue
            print(f"hf decode batch {b}, {a.steps} steps: {b * a.steps / (time.perf_counter() - t0):.1f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
