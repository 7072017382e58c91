#!/usr/bin/env bash
# ExecuTorch's own runtime on this x86 machine, for side-by-side figures with qnnrt on the same .pte.
#
#   bash bench/anchor/setup.sh ANCHOR      (a few minutes and ~3 GB the first time; re-running it only
#                                           rebuilds the shim and rewrites ANCHOR/env.sh)
#   . ANCHOR/env.sh
#
# Makes, all from public PyPI packages:
#   ANCHOR/venv        Python venv: torch 2.13 (CPU), executorch 1.5.1, numpy, onnxruntime-qnn 2.7.0
#                      (--no-deps: only its QNN 2.51 libraries are used)
#   ANCHOR/qnn_sdk/lib/x86_64-linux-clang/
#                      a QNN SDK root's library folder: links to the onnxruntime-qnn libraries, and
#                      libQnnHtp.so built from qnn_shim.c (it forwards to the real one; README.md)
#   ANCHOR/env.sh      QNN_SDK_ROOT, QNN_SHIM_REAL (the real libQnnHtp.so), LD_LIBRARY_PATH (the library
#                      folder first, so ExecuTorch loads the shim), ET_PY (the venv's python) and
#                      QNNRT_ANCHOR (ANCHOR, the default of the bench scripts' --anchor)
# Variables: PYTHON (the interpreter the venv is made from; default python3.11, else python3),
# TORCH_SPEC (default torch==2.13.0; a CPU build is picked where pip is set up to find one), CC.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: bash $0 ANCHOR_DIR" >&2
  exit 2
fi
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
ANCHOR=$(cd "$1" && pwd)
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
CC=${CC:-$(command -v cc || command -v gcc || command -v clang || true)}
[ -n "$CC" ] || { echo "no C compiler (cc, gcc or clang) to build the shim" >&2; exit 1; }

VENV=$ANCHOR/venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import executorch.runtime, onnxruntime_qnn" 2>/dev/null; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip wheel
  # torch first, so that executorch's requirement is met by this build and not another one
  "$VENV/bin/python" -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  "$VENV/bin/python" -m pip install -q executorch==1.5.1 numpy
  "$VENV/bin/python" -m pip install -q --no-deps onnxruntime-qnn==2.7.0
fi

WHEEL=$("$VENV/bin/python" -c "import onnxruntime_qnn, os; print(os.path.dirname(onnxruntime_qnn.__file__))")
[ -f "$WHEEL/libQnnHtp.so" ] || { echo "no libQnnHtp.so in $WHEEL" >&2; exit 1; }
LIB=$ANCHOR/qnn_sdk/lib/x86_64-linux-clang
mkdir -p "$LIB"
# every library of the wheel (and of its bundled C++ runtime folder) but libQnnHtp.so, by link
for f in "$WHEEL"/*.so "$WHEEL"/../onnxruntime_qnn.libs/*; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  [ "$name" = libQnnHtp.so ] && continue
  ln -sfn "$(cd "$(dirname "$f")" && pwd)/$name" "$LIB/$name"
done
# the SDK's name for the HTP graph compiler, which the wheel ships as libHtpPrepare.so
[ -e "$WHEEL/libHtpPrepare.so" ] && ln -sfn "$WHEEL/libHtpPrepare.so" "$LIB/libQnnHtpPrepare.so"

# built beside and renamed into place: a process that has the old shim loaded keeps it
"$CC" -O2 -Wall -shared -fPIC -Wl,-z,nodelete -I"$KIT" -o "$LIB/.libQnnHtp.so.$$" "$KIT/qnn_shim.c" -ldl
mv -f "$LIB/.libQnnHtp.so.$$" "$LIB/libQnnHtp.so"

cat > "$ANCHOR/env.sh" <<EOF
# made by $KIT/setup.sh; source it: . $ANCHOR/env.sh
export QNNRT_ANCHOR=$ANCHOR
export QNN_SDK_ROOT=$ANCHOR/qnn_sdk
export QNN_SHIM_REAL=$WHEEL/libQnnHtp.so
export LD_LIBRARY_PATH=$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export ET_PY=$VENV/bin/python
EOF
echo "ready: . $ANCHOR/env.sh; \$ET_PY $KIT/et_run.py MODEL.pte --iteration 30"
