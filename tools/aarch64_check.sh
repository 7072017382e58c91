#!/usr/bin/env bash
# qnnrt on Linux aarch64, checked on an x86_64 machine: builds an arm64 Debian bookworm root with
# debootstrap + qemu-user-static (binfmt), installs the qnnrt wheel there from the package index as
# a user would (python3 -m venv; pip install qnnrt-*.whl), and checks, with no QNN library present:
#   - the dependencies resolve for aarch64 (plain onnxruntime, no onnxruntime-qnn) and import
#   - `qnnrt doctor` names the missing libraries and QNN_SDK_ROOT (exit 1), also as --json, and the
#     folders of a wrong QNN_SDK_ROOT
#   - `qnnrt inspect` works on a .pte fixture and on an EPContext model
#   - `qnnrt run` exits 1 with the library-not-found message (also with a wrong QNN_SDK_ROOT)
#   - the QNN log callback formats a varargs message, driven by a C library built for aarch64
#     (aarch64-linux-gnu-gcc) that calls it as QNN does
#
# Usage (as root): bash tools/aarch64_check.sh [--fresh]
#   --fresh            rebuild the arm64 root even if one is there (else it is reused; a fresh one
#                      takes ~15-25 min: debootstrap of bookworm arm64 under qemu)
#   env ROOTFS         the arm64 root (default: /var/tmp/qnnrt-arm64-root)
#   env QNNRT_REPO     the qnnrt source tree to build the wheel from (default: this repository)
#   env FIXTURE        the .pte to inspect/run (default: tests/data/executorch/add_relu_mul_fp16)
#   env LOGDIR         where logs go (default: /var/tmp/qnnrt-aarch64-check)
#   env MIRROR         the Debian mirror for debootstrap
# Writes $LOGDIR/aarch64_check-<time>.log; exit 0 when every check passed (2: could not set up).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=${QNNRT_REPO:-$(cd "$HERE/.." && pwd)}
ROOTFS=${ROOTFS:-/var/tmp/qnnrt-arm64-root}
FIXTURE=${FIXTURE:-$REPO/tests/data/executorch/add_relu_mul_fp16/model.pte}
LOGDIR=${LOGDIR:-/var/tmp/qnnrt-aarch64-check}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
FRESH=0
[ "${1:-}" = "--fresh" ] && FRESH=1
mkdir -p "$LOGDIR"
LOG="$LOGDIR/aarch64_check-$(date +%Y%m%d-%H%M%S).log"
exec > >(tee "$LOG") 2>&1

T0=$(date +%s)
PASS=0; FAIL=0; SKIP=0; RESULTS=()
say() { echo "== $*"; }
result() {  # result PASS|FAIL|SKIP name [detail]
  RESULTS+=("$1  $2${3:+  ($3)}")
  case $1 in PASS) PASS=$((PASS+1));; FAIL) FAIL=$((FAIL+1));; SKIP) SKIP=$((SKIP+1));; esac
  echo "-- $1: $2${3:+ ($3)}"
}
timed() {  # timed name cmd...: run, print its duration
  local s=$(date +%s); "${@:2}"; local rc=$?
  echo "   [$1: $(( $(date +%s) - s )) s, exit $rc]"; TIMES+=("$1: $(( $(date +%s) - s )) s"); return $rc
}
TIMES=()
die() { echo "FATAL: $*"; exit 2; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot, mount)"

# ---- 1. host tools --------------------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
if [ ${#need[@]} -gt 0 ]; then
  say "apt-get install ${need[*]}"
  timed host-packages bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${need[*]} >/dev/null" \
    || die "cannot install ${need[*]}"
fi

# ---- 2. binfmt: run arm64 binaries through qemu (F flag: works inside the chroot) --------------
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || die "cannot mount binfmt_misc"
fi
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
grep -q enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null || die "qemu-aarch64 binfmt is not registered"
grep -q "flags:.*F" /proc/sys/fs/binfmt_misc/qemu-aarch64 || echo "warning: binfmt without F flag; the chroot may not find the interpreter"

# ---- 3. the arm64 root ------------------------------------------------------------------------
if [ $FRESH = 1 ] || [ ! -e "$ROOTFS/.qnnrt-rootfs-ok" ]; then
  say "debootstrap $SUITE arm64 -> $ROOTFS"
  for m in dev/pts dev proc sys; do umount "$ROOTFS/$m" 2>/dev/null; done
  rm -rf "$ROOTFS"
  timed debootstrap debootstrap --arch=arm64 --variant=minbase \
    --include=python3,python3-pip,python3-venv,ca-certificates "$SUITE" "$ROOTFS" "$MIRROR" \
    > "$LOGDIR/debootstrap.log" 2>&1 || { tail -20 "$LOGDIR/debootstrap.log"; die "debootstrap failed"; }
  touch "$ROOTFS/.qnnrt-rootfs-ok"
else
  say "reusing $ROOTFS (--fresh to rebuild)"
fi

# ---- 4. what goes into the root: the wheel, fixtures, the aarch64 log library -----------------
STAGE="$ROOTFS/opt/qnnrt-check"
rm -rf "$STAGE"; mkdir -p "$STAGE/dist"
say "build the qnnrt wheel from $REPO"
timed wheel python3 -m pip wheel -q --no-deps -w "$STAGE/dist" "$REPO" || die "wheel build failed"
WHEEL=$(basename "$(ls "$STAGE"/dist/qnnrt-*.whl)")
echo "   $WHEEL"
cp "$FIXTURE" "$STAGE/model.pte" || die "no fixture $FIXTURE"
cp "$REPO/tests/helpers/logcb_check.py" "$REPO/tests/data/fake_qnn_log.c" "$STAGE/"
say "cross-compile the fake QNN log library for aarch64"
timed cross-cc aarch64-linux-gnu-gcc -shared -fPIC -O1 -o "$STAGE/libfake_qnn_log.so" "$REPO/tests/data/fake_qnn_log.c" \
  && file "$STAGE/libfake_qnn_log.so" | grep -q "ARM aarch64" \
  || die "cross-compiling the log library failed"
# an EPContext model (two QNN partitions with a CPU node between), made here with onnxruntime-qnn
say "make an EPContext model on the host (onnxruntime-qnn x86_64)"
EPC_START=$(date +%s)
if (cd "$REPO" && PYTHONPATH="$REPO" timeout 600 python3 - "$STAGE" <<'EOF'
import sys, onnx
from pathlib import Path
from qnnrt.compiler.compile import qnn_session
from tests.helpers.qnn_fixtures import two_partitions
d = Path(sys.argv[1])
onnx.save(two_partitions(), d / "m.onnx")
qnn_session(d / "m.onnx", config={"ep.context_enable": "1", "ep.context_embed_mode": "1",
                                  "ep.context_file_path": str(d / "m_ctx.onnx")})
EOF
) > "$LOGDIR/epcontext.log" 2>&1 && [ -s "$STAGE/m_ctx.onnx" ]; then HAVE_EPCTX=1; else HAVE_EPCTX=0; tail -5 "$LOGDIR/epcontext.log"; fi
TIMES+=("epcontext (host): $(( $(date +%s) - EPC_START )) s")

# ---- 5. into the chroot ---------------------------------------------------------------------
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mount --bind /dev "$ROOTFS/dev"; mount --bind /dev/pts "$ROOTFS/dev/pts"
# /proc but not /sys: with both from the x86_64 host, onnxruntime's cpuinfo (which reads the CPU
# lists in /sys and the x86 /proc/cpuinfo qemu 7.2 passes through) segfaults on import under
# qemu-user. A real board has real ones; either alone is fine.
mount -t proc proc "$ROOTFS/proc"
cleanup() { for m in dev/pts dev proc sys; do umount "$ROOTFS/$m" 2>/dev/null; done; }
trap cleanup EXIT
# a user's shell: no host pip configuration, no host PYTHONPATH
CERT_ENV=()
IN() { chroot "$ROOTFS" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
         PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
         PIP_DISABLE_PIP_VERSION_CHECK=1 "${CERT_ENV[@]}" "$@"; }

# the host's own CA additions (a network that inspects TLS): the root trusts what the host trusts
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$ROOTFS/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
  IN update-ca-certificates >/dev/null 2>&1 || echo "warning: update-ca-certificates failed in the root"
  # pip in a venv trusts its own certifi bundle, not the system store: point it at the system one
  CERT_ENV=(PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
fi
say "inside: $(IN uname -m) / $(IN python3 --version) / glibc $(IN ldd --version | head -1 | awk '{print $NF}')"
IN rm -rf /opt/venv
timed venv IN python3 -m venv /opt/venv || die "venv failed"
say "pip install $WHEEL (dependencies from the package index)"
if timed pip-install IN pip install --progress-bar off "/opt/qnnrt-check/dist/$WHEEL" > "$LOGDIR/pip-install.log" 2>&1; then
  result PASS "pip install qnnrt wheel + deps on aarch64" "$(grep -o 'Successfully installed.*' "$LOGDIR/pip-install.log" | cut -c1-300)"
else
  tail -30 "$LOGDIR/pip-install.log"
  result FAIL "pip install qnnrt wheel + deps on aarch64" "see $LOGDIR/pip-install.log"
fi
IN pip list 2>/dev/null | grep -i -E "onnx|numpy|flatbuffers|qnnrt|protobuf"
if IN pip list 2>/dev/null | grep -qi "^onnxruntime-qnn "; then result FAIL "no onnxruntime-qnn on aarch64"
else result PASS "no onnxruntime-qnn on aarch64 (plain onnxruntime)"; fi
out=$(timed import-ort IN python -c "import onnxruntime as o; print(o.__version__, o.get_available_providers())" 2>&1)
echo "$out"
echo "$out" | grep -q CPUExecutionProvider && result PASS "onnxruntime imports, CPU EP" "$(echo "$out" | grep CPUExecutionProvider | head -1)" \
  || result FAIL "onnxruntime imports, CPU EP"

# ---- 6. the checks --------------------------------------------------------------------------
run_q() {  # run_q OUTVAR_PREFIX env... -- args: qnnrt with extra env, captures rc/out/err
  local envs=() ; while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  QOUT=$(IN env "${envs[@]}" qnnrt "$@" 2>/tmp/qnnrt_err); QRC=$?; QERR=$(cat /tmp/qnnrt_err)
}
say "qnnrt --version"; run_q -- --version; echo "$QOUT"
[ $QRC = 0 ] && result PASS "qnnrt --version" "$QOUT" || result FAIL "qnnrt --version" "rc=$QRC $QERR"

say "platform discovery inside the root"
IN python -c "
from qnnrt._capi import platforms as p, libc
h = p.detect_host(); print(h.os, h.machine, p.library_names(h), p.sdk_targets(h)); print('log formatter:', libc.FORMATTER and libc.FORMATTER.name)"

say "qnnrt doctor (no QNN libraries anywhere)"
run_q -- doctor; echo "$QOUT"; echo "$QERR" | tail -5
if [ $QRC = 1 ] && echo "$QOUT" | grep -q "FAIL  libQnnHtp.so" && echo "$QOUT" | grep -q "QNN_SDK_ROOT" \
   && echo "$QOUT" | grep -q "ONNX Runtime"; then
  result PASS "qnnrt doctor names the missing libraries and QNN_SDK_ROOT (exit 1)"
else
  result FAIL "qnnrt doctor names the missing libraries and QNN_SDK_ROOT" "rc=$QRC"
fi
say "qnnrt doctor --json with a wrong QNN_SDK_ROOT"
run_q QNN_SDK_ROOT=/opt/no-such-sdk -- doctor --json
echo "$QOUT" | IN python -c "
import json, sys
d = json.load(sys.stdin)
(p,) = d['problems']
assert p['name'] == 'libQnnHtp.so' and '/opt/no-such-sdk/lib/aarch64-' in p['detail'], p
assert 'QNN_SDK_ROOT' in p['fix'] and d['onnxruntime']['available'] and d['platform']['machine'] == 'aarch64'
print('problem:', p['detail'].splitlines()[0], '| fix:', p['fix'][:90])"
prc=$?
[ $QRC = 1 ] && [ $prc = 0 ] && result PASS "qnnrt doctor --json: wrong QNN_SDK_ROOT named with its lib/aarch64-* folders (exit 1)" \
  || result FAIL "qnnrt doctor --json with a wrong QNN_SDK_ROOT" "rc=$QRC, json check $prc"

say "qnnrt inspect model.pte"
s=$(date +%s); run_q -- inspect /opt/qnnrt-check/model.pte; echo "$QOUT" | head -20; echo "$QERR" | tail -5
[ $QRC = 0 ] && [ -n "$QOUT" ] && result PASS "qnnrt inspect .pte" "$(( $(date +%s) - s )) s" \
  || result FAIL "qnnrt inspect .pte" "rc=$QRC: $(echo "$QERR" | tail -1)"

if [ $HAVE_EPCTX = 1 ]; then
  say "qnnrt inspect m_ctx.onnx (EPContext)"
  run_q -- inspect /opt/qnnrt-check/m_ctx.onnx; echo "$QOUT" | head -20; echo "$QERR" | tail -5
  [ $QRC = 0 ] && [ -n "$QOUT" ] && result PASS "qnnrt inspect EPContext .onnx" \
    || result FAIL "qnnrt inspect EPContext .onnx" "rc=$QRC: $(echo "$QERR" | tail -1)"
else
  result SKIP "qnnrt inspect EPContext .onnx" "could not make one on the host ($LOGDIR/epcontext.log)"
fi

say "qnnrt run model.pte (no QNN libraries anywhere)"
run_q -- run /opt/qnnrt-check/model.pte; echo "$QERR" | tail -8
if [ $QRC = 1 ] && echo "$QERR" | grep -q "cannot find libQnnHtp.so" && echo "$QERR" | grep -q "QNN_SDK_ROOT"; then
  result PASS "qnnrt run exits 1 with the library message"
else result FAIL "qnnrt run exits 1 with the library message" "rc=$QRC"; fi

say "qnnrt run model.pte with a wrong QNN_SDK_ROOT"
run_q QNN_SDK_ROOT=/opt/no-such-sdk -- run /opt/qnnrt-check/model.pte; echo "$QERR" | tail -8
if [ $QRC = 1 ] && echo "$QERR" | grep -q "/opt/no-such-sdk/lib/aarch64-"; then
  result PASS "wrong QNN_SDK_ROOT: exit 1 naming lib/aarch64-* folders"
else result FAIL "wrong QNN_SDK_ROOT: exit 1 naming lib/aarch64-* folders" "rc=$QRC"; fi

if [ $HAVE_EPCTX = 1 ]; then
  say "qnnrt run m_ctx.onnx (no QNN libraries)"
  run_q -- run /opt/qnnrt-check/m_ctx.onnx; echo "$QERR" | tail -4
  [ $QRC = 1 ] && echo "$QERR" | grep -q "cannot find libQnnHtp.so" && result PASS "qnnrt run EPContext exits 1 with the library message" \
    || result FAIL "qnnrt run EPContext exits 1 with the library message" "rc=$QRC"
fi

say "log callback varargs through the aarch64 C library"
out=$(IN python /opt/qnnrt-check/logcb_check.py /opt/qnnrt-check/libfake_qnn_log.so 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] && result PASS "log callback formats varargs on aarch64" "$(echo "$out" | tail -1)" \
  || result FAIL "log callback formats varargs on aarch64" "$(echo "$out" | tail -1)"

# ---- summary --------------------------------------------------------------------------------
echo
say "summary ($(( $(date +%s) - T0 )) s total)"
printf '   %s\n' "${TIMES[@]}"
printf '   %s\n' "${RESULTS[@]}"
echo "$PASS passed, $FAIL failed, $SKIP skipped"
echo "log: $LOG"
[ $FAIL = 0 ]
