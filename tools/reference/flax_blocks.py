"""A spec's named blocks and residual connections in Flax (docs/models.md, "Blocks and
residual connections").

A block `model.blocks.ResNetBlock` is a Flax module class named ResNetBlock (so that Flax
auto-names its instances ResNetBlock_0, ResNetBlock_1, ... and nests their params and
batch_stats under those names); its attributes are the block's args, and "$arg" strings in
its layers stand for their values. A residual connection is `x + layers(x)`, x first
projected where the shapes differ, as Flax's ResNet example writes its block:

    residual = x
    y = layers(x)
    if residual.shape != y.shape:
      residual = projection(residual)
    return residual + y
"""
import json

import flax.linen as nn

import golden_layers


class Block(nn.Module):
  """One block call: the block's layers with its args filled in."""
  layers_json: str
  axis_name: str | None = None
  blocks_json: str = "{}"

  @nn.compact
  def __call__(self, x, train: bool = False):
    return golden_layers.apply_layers(json.loads(self.layers_json), x, train, self.axis_name,
                                      json.loads(self.blocks_json), self)


_CLASSES = {}


def block_class(name):
  """The Flax module class for block `name` (one per name: Flax names instances by it)."""
  if name not in _CLASSES:
    _CLASSES[name] = type(name, (Block,), {})
  return _CLASSES[name]


def substitute(value, args):
  if isinstance(value, str) and value.startswith("$"):
    return args[value[1:]]
  if isinstance(value, dict):
    return {k: substitute(v, args) for k, v in value.items()}
  if isinstance(value, list):
    return [substitute(v, args) for v in value]
  return value


def call_block(o, x, train, axis_name, blocks):
  definition = blocks[o["module"]]
  args = dict(definition.get("args", {}))
  args.update(o.get("args", {}))
  layers = substitute(definition["layers"], args)
  cls = block_class(o["module"])
  return cls(json.dumps(layers), axis_name, json.dumps(blocks), name=o.get("name") or None)(
      x, train)


def residual(o, x, train, axis_name, blocks, module):
  y = golden_layers.apply_layers(o["layers"], x, train, axis_name, blocks, module)
  r = x
  if r.shape != y.shape:
    r = golden_layers.apply_layers(o.get("projection", []), x, train, axis_name, blocks, module)
  return r + y
