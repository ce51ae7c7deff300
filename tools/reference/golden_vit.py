"""Golden files for vision transformers (docs/models.md, "Vision transformers"): image
patches as tokens (a conv with kernel = strides = the patch, then to_sequence), ViT's class
token and learned position embeddings (AddPositionEmbs), pre-norm encoder blocks of
non-causal attention and an MLP in residual connections, and a pooled head: the class
token's output (ViT's classifier='token') or the mean over the tokens ('gap').

Flax builds each model from the same spec the C++ side reads (golden_layers.Sequential),
and the files are written as golden_layers writes its own (layers_vit_*.safetensors:
init, the loss and every gradient with dropout, 20 steps of sgd with the same masks), so
tests/golden_layers_test.cc reads them. Written by make_golden.py (--only vit).
"""
import os

import golden_layers

ENCODER = {  # a pre-norm encoder block, as the reference ViT's Encoder1DBlock
    "args": {"heads": None, "features": None, "mlp": None},
    "layers": [
        {"residual": {"layers": [  # x + dropout(attention(norm(x)))
            {"layer_norm": {}},
            {"multi_head_attention": {"num_heads": "$heads", "dropout_rate": 0.1}},
            {"dropout": {"rate": 0.1}},
        ]}},
        {"residual": {"layers": [  # x + mlp(norm(x))
            {"layer_norm": {}},
            {"dense": {"features": "$mlp"}},
            {"gelu": {}},
            {"dropout": {"rate": 0.1}},
            {"dense": {"features": "$features"}},
        ]}},
    ],
}

TOKEN = {  # 4x4 patches of a 12x12x2 image: 9 tokens and the class token; ViT's names
    "input_shape": [12, 12, 2],
    "blocks": {"Encoder1DBlock": ENCODER},
    "layers": [
        {"conv": {"features": 16, "kernel_size": [4, 4], "strides": [4, 4], "padding": "VALID",
                  "name": "embedding"}},
        {"to_sequence": {}},
        {"class_token": {}},
        {"add_position_embs": {"name": "posembed_input"}},
        {"dropout": {"rate": 0.1}},
        {"block": {"module": "Encoder1DBlock", "args": {"heads": 2, "features": 16, "mlp": 32}}},
        {"block": {"module": "Encoder1DBlock", "args": {"heads": 4, "features": 16, "mlp": 24}}},
        {"layer_norm": {"name": "encoder_norm"}},
        {"sequence_pool": {"method": "first"}},
        {"dense": {"features": 10, "name": "head"}},
    ],
}

GAP = {  # 2x2 patches of an 8x8x3 image: 16 tokens, mean-pooled; a wider initializer
    "input_shape": [8, 8, 3],
    "blocks": {"Encoder1DBlock": ENCODER},
    "layers": [
        {"conv": {"features": 12, "kernel_size": [2, 2], "strides": [2, 2], "padding": "VALID"}},
        {"to_sequence": {}},
        {"add_position_embs": {"stddev": 0.5}},
        {"block": {"module": "Encoder1DBlock", "args": {"heads": 3, "features": 12, "mlp": 20}}},
        {"layer_norm": {}},
        {"sequence_pool": {"method": "mean"}},
        {"dense": {"features": 10}},
    ],
}

# sgd, not adam: attention's key bias has a true gradient of 0 (golden_sequence.py), and
# adam would scale its rounding noise to steps of the learning rate, in JAX and here alike.
SGD = {"kind": "sgd", "learning_rate": 0.05, "momentum": 0.9}
SPECS = {"vit_token": dict(model=TOKEN, optimizer=SGD), "vit_gap": dict(model=GAP, optimizer=SGD)}


def write_goldens(out):
  for name, base in SPECS.items():
    golden_layers.write_golden(out, name, base)


if __name__ == "__main__":
  write_goldens(os.path.join(os.path.dirname(__file__), "../../tests/golden"))
