"""4a. Kernels CUDA has and CPU lacks, which the device path of PyTorch's own code calls: the fused
LSTM and GRU cells (nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell take them for non-CPU inputs). Each is
computed here with CPU ops in the math of CUDA's kernel (aten/src/ATen/native/cuda/RNN.cu:
lstm_cell_forward/backward, gru_cell_forward/backward); the workspace each forward saves for its
backward holds the same gates CUDA's does."""

from __future__ import annotations

from typing import Any

import torch

from samedevice.emulator import native
from samedevice.emulator.native import tree_map
from samedevice.emulator.rules import SPECIAL, check_common_device

aten = torch.ops.aten


def _biased(gates: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return gates if bias is None else gates + bias


def lstm_cell(input_gates: Any, hidden_gates: Any, cx: Any, input_bias: Any = None, hidden_bias: Any = None) -> Any:
    gates = _biased(input_gates, input_bias) + _biased(hidden_gates, hidden_bias)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(grad_hy: Any, grad_cy: Any, cx: Any, cy: Any, workspace: Any, has_bias: bool) -> Any:
    i, f, g, o = workspace.chunk(4, 1)
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_cy = torch.zeros_like(cy) if grad_cy is None else grad_cy
    tanh_cy = cy.tanh()
    grad_o = grad_hy * tanh_cy * o * (1 - o)
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy) + grad_cy
    grad_gates = torch.cat([grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f), grad_c * i * (1 - g * g), grad_o], 1)
    grad_bias = grad_gates.sum(0) if has_bias else torch.empty(0, dtype=cy.dtype)
    return grad_gates, grad_c * f, grad_bias


def gru_cell(input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None, hidden_bias: Any = None) -> Any:
    ir, ii, in_ = _biased(input_gates, input_bias).chunk(3, 1)
    hr, hi, hn = _biased(hidden_gates, hidden_bias).chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def gru_cell_backward(grad_hy: Any, workspace: Any, has_bias: bool) -> Any:
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_hx = grad_hy * z
    grad_in = grad_hy * (1 - z) * (1 - n * n)
    grad_hn = grad_in * r
    grad_r = grad_in * hn * (1 - r) * r
    grad_input_gates = torch.cat([grad_r, grad_z, grad_in], 1)
    grad_hidden_gates = torch.cat([grad_r, grad_z, grad_hn], 1)
    empty = torch.empty(0, dtype=grad_hy.dtype)
    return (grad_input_gates, grad_hidden_gates, grad_hx,
            grad_input_gates.sum(0) if has_bias else empty, grad_hidden_gates.sum(0) if has_bias else empty)


def _on_cpu(math: Any) -> Any:
    def handler(func: Any, args: Any, kwargs: Any) -> Any:
        names = [a.name for a in func._schema.arguments]
        # CUDA's kernels carry torchgen's whole-op check: every tensor argument on one device
        index = check_common_device(func, None, list(zip(names, args)) + list(kwargs.items()))
        return native.wrap(math(*tree_map(native.host, args), **tree_map(native.host, kwargs)), {}, index)
    return handler


SPECIAL.update({
    aten._thnn_fused_lstm_cell.default: _on_cpu(lstm_cell),
    aten._thnn_fused_lstm_cell_backward_impl.default: _on_cpu(lstm_cell_backward),
    aten._thnn_fused_gru_cell.default: _on_cpu(gru_cell),
    aten._thnn_fused_gru_cell_backward.default: _on_cpu(gru_cell_backward),
})
