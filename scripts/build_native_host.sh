#!/usr/bin/env bash
# Builds the C++ host extension (cuda/host: the SpMM autograd, a new graph's launches)
# by hand, for a host whose torch and Python differ from this machine's
# (a GPU host, from a CPU host):
#
#   scripts/build_native_host.sh TORCH_DIR PYTHON_VERSION OUT_DIR
#
# TORCH_DIR: the torch package of the target's exact version (its include/
# and lib/; the unzipped wheel does: `pip download torch==2.11.0 --no-deps`,
# then `unzip 'torch/include/*' 'torch/lib/*'`); PYTHON_VERSION: the
# target's Python (3.12), whose headers must be here (pyenv's: its
# interpreter is found as pythonX.Y or under $PYENV_ROOT); OUT_DIR:
# where the module goes. Point $PYG_IOAWARE_HOST_LIB at it on the target.
# A normal install builds it with CMake instead (see CMakeLists.txt).
set -euo pipefail
torch_dir=$1 python_version=$2 out_dir=$3
python="python$python_version"
if ! "$python" -c "" 2>/dev/null; then
  python=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$python_version"*/bin/python | tail -1)
fi
python_include=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$python" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include  # cuda_runtime_api.h, for c10/cuda
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out_dir"
g++ -O2 -shared -fPIC -fvisibility=hidden -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 \
  -DTORCH_EXTENSION_NAME=_native_host_ext -DTORCH_API_INCLUDE_EXTENSION_H \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I"$python_include" \
  -I"$cuda_include" -I"$root/cuda/include" "$root"/cuda/host/*.cpp \
  -L"$torch_dir/lib" -lc10 -lc10_cuda -ltorch_cpu -ltorch -ltorch_python \
  -o "$out_dir/_native_host_ext$suffix"
echo "$out_dir/_native_host_ext$suffix"
