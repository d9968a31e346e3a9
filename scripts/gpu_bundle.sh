#!/usr/bin/env bash
# Prepare the wheels a GPU machine without network access needs for scripts/gpu_check.sh.
#
# The lent H200 machines have Python 3.12 with PyTorch (CUDA), NumPy, pytest and ml-dtypes,
# but not apache-tvm / apache-tvm-ffi, and nothing can be downloaded there. A call to them
# carries at most 64 MiB, and the apache-tvm wheel is ~100 MB, so this splits it in two:
#
#   bash scripts/gpu_bundle.sh          # here, with network: fills .gpu_whl1/ and .gpu_whl2/
#   run(carry=[".gpu_whl1"], command="cp -r .gpu_whl1 /tmp/")          # call 1 (copies part 1)
#   run(carry=[".gpu_whl2"], command="bash scripts/gpu_check.sh")      # call 2, within 30 s,
#                                       # on the still-warm machine: gpu_check joins the parts
#
# Both folders are listed in .git/info/exclude (never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER="${GPU_PYVER:-3.12}"
for d in .gpu_whl1 .gpu_whl2; do
    grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude
done
rm -rf .gpu_whl1 .gpu_whl2 /tmp/gpu_whl_dl
mkdir -p .gpu_whl1 .gpu_whl2 /tmp/gpu_whl_dl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp "${PLAT[@]}" \
    -d /tmp/gpu_whl_dl "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.14.post0"
TVM=$(ls /tmp/gpu_whl_dl/apache_tvm-*.whl)
split -n 2 -d "$TVM" ".gpu_whl1/$(basename "$TVM").part"
mv ".gpu_whl1/$(basename "$TVM").part01" .gpu_whl2/
mv /tmp/gpu_whl_dl/apache_tvm_ffi-*.whl .gpu_whl2/
du -sh .gpu_whl1 .gpu_whl2
echo "ready: carry .gpu_whl1 in one call (copy it to /tmp), then .gpu_whl2 with scripts/gpu_check.sh"
