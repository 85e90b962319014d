#!/usr/bin/env python3
"""Generates profiles/workloads/*.json (schema ciuic.workload/1): the gradient tensors of four
published models in backward order (the order DDP/Horovod see gradients become ready: reverse of
parameter registration), with the forward FLOPs per sample of the operation each tensor belongs to.

    scripts/gen_workloads.py            # (re)write the JSON files
    scripts/gen_workloads.py --check    # exit 1 if the committed files differ from what this generates

Standard library only (any python3). Parameter totals are asserted against the published counts:
ResNet-50 25,557,032 (torchvision resnet50); BERT-large 335,141,888 (bert-large-uncased with pooler);
GPT-2 XL 1,557,611,200 (tied LM head); Llama-2-7B 6,738,415,616 (untied LM head).

FLOPs: a matmul of a [out, in] weight costs 2·in·out per token; a k×k conv 2·k²·Cin·Cout per output
pixel; norms and biases ~ a few FLOPs per element (counted as 4 per element they touch). The
attention core (QKᵀ and the weighted sum, 4·seq²·d per layer) is attributed to the layer's output
projection. Backward costs about 2× forward; consumers apply that factor.
"""
import json
import os
import sys


def check(condition, what="check failed"):
    """An assertion that `python3 -O` (PYTHONOPTIMIZE) cannot remove."""
    if not condition:
        raise AssertionError(what)


ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "profiles", "workloads")


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class Model:
    def __init__(self, name, source, tokens_or_pixels_note, default_batch):
        self.name = name
        self.source = source
        self.note = tokens_or_pixels_note
        self.default_batch = default_batch
        self.tensors = []  # forward (registration) order
        self.transformer = None  # {"hidden", "sequence", "layers", "ffn"}: ciuic-tune's fusion estimate

    def add(self, name, shape, forward_flops):
        self.tensors.append({"name": name, "shape": list(shape), "forward_flops": int(forward_flops)})

    def document(self, expected_params):
        params = sum(numel(t["shape"]) for t in self.tensors)
        check(params == expected_params, f"{self.name}: {params} parameters, published {expected_params}")
        return {
            "schema": "ciuic.workload/1",
            "name": self.name,
            "source": self.source,
            "flops_note": self.note,
            "dtype": "fp32",
            "parameters": params,
            "forward_flops_per_sample": sum(t["forward_flops"] for t in self.tensors),
            "default_batch_per_device": self.default_batch,
            "order": "backward",
            **({"transformer": self.transformer} if self.transformer else {}),
            "tensors": list(reversed(self.tensors)),
        }


def resnet50():
    m = Model("resnet50", "He et al. 2015, 'Deep Residual Learning'; torchvision resnet50 (v1.5: stride in the 3x3 conv)",
              "per 224x224 image", 256)

    def conv(name, cin, cout, k, hw_out):
        m.add(name + ".weight", (cout, cin, k, k), 2 * k * k * cin * cout * hw_out * hw_out)

    def bn(name, c, hw):
        m.add(name + ".weight", (c,), 4 * c * hw * hw)
        m.add(name + ".bias", (c,), 0)

    conv("conv1", 3, 64, 7, 112)
    bn("bn1", 64, 112)
    cin, hw = 64, 56
    for li, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], start=1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            out_hw = hw // s
            p = f"layer{li}.{b}"
            conv(p + ".conv1", cin, width, 1, hw)
            bn(p + ".bn1", width, hw)
            conv(p + ".conv2", width, width, 3, out_hw)
            bn(p + ".bn2", width, out_hw)
            conv(p + ".conv3", width, width * 4, 1, out_hw)
            bn(p + ".bn3", width * 4, out_hw)
            if b == 0:
                conv(p + ".downsample.0", cin, width * 4, 1, out_hw)
                bn(p + ".downsample.1", width * 4, out_hw)
            cin, hw = width * 4, out_hw
    m.add("fc.weight", (1000, 2048), 2 * 2048 * 1000)
    m.add("fc.bias", (1000,), 1000)
    return m.document(25557032)


def bert_large(seq=512):
    m = Model("bert_large", "Devlin et al. 2018, 'BERT'; bert-large-uncased: 24 layers, hidden 1024, 16 heads, "
              "FFN 4096, vocab 30522, 512 positions, with pooler", f"per sequence of {seq} tokens", 16)
    d, ff, v = 1024, 4096, 30522

    def linear(name, din, dout, attention_core=0):
        m.add(name + ".weight", (dout, din), 2 * din * dout * seq + attention_core)
        m.add(name + ".bias", (dout,), seq * dout)

    def norm(name):
        m.add(name + ".weight", (d,), 4 * d * seq)
        m.add(name + ".bias", (d,), 0)

    m.add("embeddings.word_embeddings.weight", (v, d), 0)
    m.add("embeddings.position_embeddings.weight", (512, d), 0)
    m.add("embeddings.token_type_embeddings.weight", (2, d), 0)
    norm("embeddings.LayerNorm")
    for i in range(24):
        p = f"encoder.layer.{i}"
        linear(p + ".attention.self.query", d, d)
        linear(p + ".attention.self.key", d, d)
        linear(p + ".attention.self.value", d, d)
        linear(p + ".attention.output.dense", d, d, attention_core=4 * seq * seq * d)
        norm(p + ".attention.output.LayerNorm")
        linear(p + ".intermediate.dense", d, ff)
        linear(p + ".output.dense", ff, d)
        norm(p + ".output.LayerNorm")
    m.add("pooler.dense.weight", (d, d), 2 * d * d)
    m.add("pooler.dense.bias", (d,), d)
    m.transformer = {"hidden": 1024, "sequence": seq, "layers": 24, "ffn": 4096}
    return m.document(335141888)


def gpt2_xl(seq=1024):
    m = Model("gpt2_xl", "Radford et al. 2019, 'Language Models are Unsupervised Multitask Learners'; GPT-2 XL: "
              "48 layers, d 1600, 25 heads, vocab 50257, 1024 positions, LM head tied to wte",
              f"per sequence of {seq} tokens", 4)
    d, v = 1600, 50257
    # wte is used twice (embedding and the tied LM head): the head's matmul is its FLOPs.
    m.add("transformer.wte.weight", (v, d), 2 * d * v * seq)
    m.add("transformer.wpe.weight", (1024, d), 0)
    for i in range(48):
        p = f"transformer.h.{i}"
        m.add(p + ".ln_1.weight", (d,), 4 * d * seq)
        m.add(p + ".ln_1.bias", (d,), 0)
        m.add(p + ".attn.c_attn.weight", (d, 3 * d), 2 * d * 3 * d * seq)  # Conv1D layout [in, out]
        m.add(p + ".attn.c_attn.bias", (3 * d,), 3 * d * seq)
        m.add(p + ".attn.c_proj.weight", (d, d), 2 * d * d * seq + 4 * seq * seq * d)
        m.add(p + ".attn.c_proj.bias", (d,), d * seq)
        m.add(p + ".ln_2.weight", (d,), 4 * d * seq)
        m.add(p + ".ln_2.bias", (d,), 0)
        m.add(p + ".mlp.c_fc.weight", (d, 4 * d), 2 * d * 4 * d * seq)
        m.add(p + ".mlp.c_fc.bias", (4 * d,), 4 * d * seq)
        m.add(p + ".mlp.c_proj.weight", (4 * d, d), 2 * 4 * d * d * seq)
        m.add(p + ".mlp.c_proj.bias", (d,), d * seq)
    m.add("transformer.ln_f.weight", (d,), 4 * d * seq)
    m.add("transformer.ln_f.bias", (d,), 0)
    m.transformer = {"hidden": 1600, "sequence": seq, "layers": 48, "ffn": 6400}
    return m.document(1557611200)


def llama2_7b(seq=4096):
    m = Model("llama2_7b", "Touvron et al. 2023, 'Llama 2'; 7B: 32 layers, d 4096, 32 heads, SwiGLU FFN 11008, "
              "vocab 32000, RMSNorm, no biases, untied LM head", f"per sequence of {seq} tokens", 1)
    d, ff, v = 4096, 11008, 32000
    m.add("model.embed_tokens.weight", (v, d), 0)
    for i in range(32):
        p = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj"):
            m.add(f"{p}.self_attn.{proj}.weight", (d, d), 2 * d * d * seq)
        m.add(f"{p}.self_attn.o_proj.weight", (d, d), 2 * d * d * seq + 4 * seq * seq * d)
        m.add(f"{p}.mlp.gate_proj.weight", (ff, d), 2 * d * ff * seq)
        m.add(f"{p}.mlp.up_proj.weight", (ff, d), 2 * d * ff * seq)
        m.add(f"{p}.mlp.down_proj.weight", (d, ff), 2 * d * ff * seq)
        m.add(f"{p}.input_layernorm.weight", (d,), 4 * d * seq)
        m.add(f"{p}.post_attention_layernorm.weight", (d,), 4 * d * seq)
    m.add("model.norm.weight", (d,), 4 * d * seq)
    m.add("lm_head.weight", (v, d), 2 * d * v * seq)
    # Llama 2 uses RMSNorm and SwiGLU: the fusion estimate times LayerNorm and GELU at its shape as stand-ins.
    m.transformer = {"hidden": 4096, "sequence": seq, "layers": 32, "ffn": 11008}
    return m.document(6738415616)


def main():
    check = "--check" in sys.argv[1:]
    docs = [resnet50(), bert_large(), gpt2_xl(), llama2_7b()]
    stale = []
    os.makedirs(OUT, exist_ok=True)
    for doc in docs:
        path = os.path.join(OUT, doc["name"] + ".json")
        text = json.dumps(doc, indent=1) + "\n"
        if check:
            try:
                with open(path) as f:
                    if f.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
        else:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        print(f"{doc['name']:<11} {doc['parameters']:>14,} parameters {len(doc['tensors']):>5} tensors "
              f"{doc['forward_flops_per_sample'] / 1e9:>10.1f} GFLOP/sample forward")
    if stale:
        print("gen_workloads: stale or missing (run scripts/gen_workloads.py): " + " ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
