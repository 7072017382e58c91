"""ONNX Runtime's run_with_iobinding on a [1,64] Tanh session: the private entry qnnrt used (with
RunOptions), the public one with RunOptions, and the public one without (what qnnrt uses now).

    python bench/bench_ort_iobinding.py
"""
import timeit

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

g = helper.make_graph([helper.make_node("Tanh", ["x"], ["y"])], "t",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 9
so = ort.SessionOptions()
so.intra_op_num_threads = so.inter_op_num_threads = 1
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
x, y = np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32)
io = s.io_binding()
io.bind_input("x", "cpu", 0, np.float32, [1, 64], x.ctypes.data)
io.bind_output("y", "cpu", 0, np.float32, [1, 64], y.ctypes.data)
ro = ort.RunOptions()
pub, priv, ib = s.run_with_iobinding, s._sess.run_with_iobinding, io._iobinding  # noqa: SLF001 - measures the private call the public one wraps


def t(f, n):
    return min(timeit.repeat(f, number=n, repeat=7)) / n * 1e6


print(f"onnxruntime {ort.__version__}")
print(f"private sess._sess.run_with_iobinding(io._iobinding, RunOptions()): {t(lambda: priv(ib, ro), 20000):.2f} us")
print(f"public  sess.run_with_iobinding(io):                               {t(lambda: pub(io), 20000):.2f} us")
print(f"public  sess.run_with_iobinding(io, RunOptions()):                 {t(lambda: pub(io, ro), 500):.2f} us")
