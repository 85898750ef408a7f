"""The embedding model's ONNX graph, written from its weights with `onnx` and numpy alone (no torch, no transformers).

all-MiniLM-L6-v2 is a BERT encoder (transformers' `BertModel`, post-LayerNorm, exact GELU); this module writes the
same computation as an ONNX graph over the package's `model.safetensors` and `config.json`, with the inputs and the
output the onnxruntime encoder feeds and reads (`input_ids`, `attention_mask`, `token_type_ids` ->
`last_hidden_state`). It is what `aidai kb build`, `make install` or the first query does once, so a core install
of aidai needs no torch (tests/test_embeddings_onnx.py checks the vectors against sentence-transformers').
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

OPSET = 17  # LayerNormalization is in 17; Gelu only from 20, so GELU is written with Erf as BertModel computes it


class _Graph:
    """Nodes and initializers of one graph; each helper returns the name of the tensor it makes."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.weights: list[Any] = []
        self._n = 0

    def _name(self, op: str) -> str:
        self._n += 1
        return f"{op.lower()}_{self._n}"

    def const(self, value: np.ndarray, name: str | None = None) -> str:
        name = name or self._name("const")
        self.weights.append(self.numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        out = self._name(op_type)
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def linear(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        """x @ W.T + b, as torch.nn.Linear (W stored [out, in])."""
        w = self.const(np.ascontiguousarray(weights[f"{prefix}.weight"].T), f"{prefix}.weight_t")
        b = self.const(weights[f"{prefix}.bias"], f"{prefix}.bias")
        return self.op("Add", self.op("MatMul", x, w), b)

    def layer_norm(self, x: str, weights: dict[str, np.ndarray], prefix: str, eps: float) -> str:
        gamma = self.const(weights[f"{prefix}.weight"], f"{prefix}.weight")
        beta = self.const(weights[f"{prefix}.bias"], f"{prefix}.bias")
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)


def _strip_prefix(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Checkpoints saved from BertForX carry a `bert.` prefix; the bare BertModel's do not."""
    return {key.removeprefix("bert."): value for key, value in weights.items()}


def build_model(model_path: Path) -> Any:
    """The onnx ModelProto of the BERT encoder in `model_path` (config.json + model.safetensors)."""
    from onnx import TensorProto, checker, helper
    from safetensors.numpy import load_file

    config = json.loads((model_path / "config.json").read_text())
    if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu" or \
            config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_path} is not a BERT encoder with absolute positions and GELU: {config}")
    weights = _strip_prefix(load_file(str(model_path / "model.safetensors")))
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim, eps = hidden // heads, float(config["layer_norm_eps"])
    g = _Graph()

    # embeddings: word + position (0..S-1) + token type, then LayerNorm
    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    seq_len = g.op("Gather", g.op("Shape", ids), g.const(np.array(1, dtype=np.int64)), axis=0)
    positions = g.op("Range", g.const(np.array(0, dtype=np.int64)), seq_len, g.const(np.array(1, dtype=np.int64)))
    word = g.op("Gather", g.const(weights["embeddings.word_embeddings.weight"], "word_embeddings"), ids)
    pos = g.op("Gather", g.const(weights["embeddings.position_embeddings.weight"], "position_embeddings"), positions)
    tok = g.op("Gather", g.const(weights["embeddings.token_type_embeddings.weight"], "token_type_embeddings"), types)
    x = g.layer_norm(g.op("Add", g.op("Add", word, pos), tok), weights, "embeddings.LayerNorm", eps)

    # padding positions get the most negative float added to their scores, as BertModel's extended mask does
    keep = g.op("Cast", mask, to=TensorProto.FLOAT)
    blocked = g.op("Mul", g.op("Sub", g.const(np.array(1.0, dtype=np.float32)), keep),
                   g.const(np.array(np.finfo(np.float32).min, dtype=np.float32)))
    additive = g.op("Unsqueeze", blocked, g.const(np.array([1, 2], dtype=np.int64)))  # [B, 1, 1, S]
    split_heads = g.const(np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_heads = g.const(np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const(np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    half, one = g.const(np.array(0.5, dtype=np.float32)), g.const(np.array(1.0, dtype=np.float32))
    root2 = g.const(np.array(math.sqrt(2.0), dtype=np.float32))

    for layer in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{layer}"

        def heads_of(name: str, perm: list[int], p: str = p, x: str = x) -> str:
            return g.op("Transpose", g.op("Reshape", g.linear(x, weights, f"{p}.attention.self.{name}"),
                                          split_heads), perm=perm)

        q = heads_of("query", [0, 2, 1, 3])  # [B, h, S, d]
        k = heads_of("key", [0, 2, 3, 1])  # [B, h, d, S]
        v = heads_of("value", [0, 2, 1, 3])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), additive)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        attended = g.linear(context, weights, f"{p}.attention.output.dense")
        x = g.layer_norm(g.op("Add", attended, x), weights, f"{p}.attention.output.LayerNorm", eps)
        inner = g.linear(x, weights, f"{p}.intermediate.dense")
        gelu = g.op("Mul", g.op("Mul", inner, half), g.op("Add", one, g.op("Erf", g.op("Div", inner, root2))))
        out = g.linear(gelu, weights, f"{p}.output.dense")
        x = g.layer_norm(g.op("Add", out, x), weights, f"{p}.output.LayerNorm", eps)

    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes, "all_minilm_l6_v2",
        [helper.make_tensor_value_info(name, TensorProto.INT64, dims) for name in (ids, mask, types)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*dims, hidden])],
        initializer=g.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="aidai")
    model.ir_version = 8  # what onnxruntime releases back to 1.15 read
    checker.check_model(model)
    return model


def write(model_path: Path, target: Path) -> None:
    """Write the graph of `model_path`'s encoder to `target` (the caller makes it atomic)."""
    import onnx

    onnx.save_model(build_model(model_path), str(target))
