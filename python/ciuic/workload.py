"""A ciuic workload file (`ciuic.workload/1`, what `ciuic-tune --workload FILE` reads) from a PyTorch
module: its gradient tensors in backward order (the reverse of parameter registration, the order DDP
sees gradients become ready) with the forward FLOPs per sample of the operation each belongs to,
counted on one forward pass of an example batch.

    from ciuic.workload import workload_from_module
    doc = workload_from_module(model, example_batch, name="charlm", source="scripts/train_tta.py")
    json.dump(doc, open("charlm.json", "w"), indent=1)

FLOPs follow scripts/gen_workloads.py: a Linear's weight 2*in*out per row of its input, its bias one
per output element; a ConvNd's weight 2*k*Cin/groups*Cout per output pixel; norms 4 per element they
touch (split between weight and bias); MultiheadAttention's input and output projections as
Linears; embeddings and parameters of other modules 0 (a lookup, or
work this count does not see, such as attention's score products, which have no parameter).
"""
import math

__all__ = ["workload_from_module"]


def workload_from_module(module, example, name, source, batch_per_device=None, flops_note=None):
    """The workload document of `module` for the example input `example` (a tensor or a tuple of
    them; its first dimension is the batch). Runs one forward pass without gradients."""
    import torch

    inputs = example if isinstance(example, tuple) else (example,)
    batch = int(inputs[0].shape[0])
    if batch < 1:
        raise ValueError("the example batch is empty")
    flops = {}  # parameter -> forward FLOPs for the whole example batch

    def add(p, f):
        if p is not None:
            flops[p] = flops.get(p, 0) + int(f)

    def hook(m, args, out):
        if isinstance(m, torch.nn.MultiheadAttention):
            # Its projections run inside F.multi_head_attention_forward, not as modules.
            rows = args[0].numel() // m.embed_dim
            add(m.in_proj_weight, 2 * m.embed_dim * 3 * m.embed_dim * rows)
            add(m.in_proj_bias, 3 * m.embed_dim * rows)
            add(m.out_proj.weight, 2 * m.embed_dim * m.embed_dim * rows)
            add(m.out_proj.bias, m.embed_dim * rows)
        elif isinstance(m, torch.nn.Linear):
            rows = args[0].numel() // m.in_features
            add(m.weight, 2 * m.in_features * m.out_features * rows)
            add(m.bias, m.out_features * rows)
        elif isinstance(m, torch.nn.modules.conv._ConvNd):
            per_pixel = 2 * math.prod(m.kernel_size) * (m.in_channels // m.groups) * m.out_channels
            pixels = out.numel() // m.out_channels
            add(m.weight, per_pixel * pixels)
            add(m.bias, out.numel())
        elif isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm)):
            add(m.weight, 2 * out.numel())
            add(m.bias, 2 * out.numel())

    handles = [m.register_forward_hook(hook) for m in module.modules()
               if not list(m.children()) or isinstance(m, torch.nn.MultiheadAttention)]
    try:
        was_training = module.training
        module.eval()
        with torch.no_grad():
            module(*inputs)
        module.train(was_training)
    finally:
        for h in handles:
            h.remove()
    tensors = []
    for pname, p in module.named_parameters():
        if not p.requires_grad:
            continue
        tensors.append({"name": pname, "shape": [int(s) for s in p.shape] or [1],
                        "forward_flops": int(round(flops.get(p, 0) / batch))})
    if not tensors:
        raise ValueError("the module has no trainable parameters")
    params = sum(math.prod(t["shape"]) for t in tensors)
    return {
        "schema": "ciuic.workload/1",
        "name": name,
        "source": source,
        "flops_note": flops_note or f"per sample of the example batch ({batch} samples, "
                                    f"input shape {list(inputs[0].shape)[1:]})",
        "dtype": "fp32",
        "parameters": params,
        "forward_flops_per_sample": sum(t["forward_flops"] for t in tensors),
        "default_batch_per_device": int(batch_per_device or batch),
        "order": "backward",
        "tensors": list(reversed(tensors)),
    }
