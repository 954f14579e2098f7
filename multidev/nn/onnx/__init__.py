"""ONNX in and out: a network from an ONNX file as a ``multidev.nn`` Graph, and a Graph written as ONNX.

Why: a network exported from another framework (``torch.onnx.export``,
tf2onnx) trains here on every engine, from its own weights; a network trained
here serves wherever ONNX runs. Reading parses the file with the ``onnx``
package (protobuf data, checked by ``onnx.checker``: no code of the file
runs) and maps each supported op onto a layer; anything multidev cannot
express exactly is one line naming the ONNX node. ``onnx`` is optional
(``pip install 'multidev[onnx]'``) and imported only when a function here runs.

The parts: ``importer`` (``from_onnx``) and ``exporter`` (``to_onnx``) run
the ``reader`` and ``writer`` over the readers and writers that the op
modules (``ops_windows``, ``ops_linear``, ``ops_norms``, ``ops_activations``,
``ops_shapes``, ``ops_slices``, ``ops_tokens``, ``ops_attention``) and
``patterns`` register in ``base``; ``constants`` folds shape arithmetic
while reading; ``naming`` gives the layers read their canonical names.
"""

from multidev.nn.onnx.base import DEFAULT_OPSET, MIN_OPSET, MIN_WRITE_OPSET, supported
from multidev.nn.onnx.exporter import to_onnx
from multidev.nn.onnx.importer import from_onnx, normalization_line

#: the ONNX ops read, each with the forms it is read in: what an unsupported op's error lists
SUPPORTED = supported()

__all__ = ["DEFAULT_OPSET", "MIN_OPSET", "MIN_WRITE_OPSET", "SUPPORTED", "from_onnx", "normalization_line",
           "to_onnx"]
