#!/usr/bin/env bash
# Install PyTorch into the venv without ever pulling a multi-GB CUDA build onto a CPU machine.
#   usage: install_torch.sh VENV_PYTHON TORCH_VERSION CONSTRAINT_FILE
# With a GPU (nvidia-smi answers) the PyPI build is right. Without one we ask for the +cpu local
# version first (a wheel mirror or find-links may carry it), then PyTorch's CPU index.
set -euo pipefail
py=$1 version=$2 constraint=$3
pip=("$py" -m pip install --quiet)

installed=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [[ -n "$installed" && "${installed%%+*}" == "$version" ]]; then
    echo "torch $installed already installed"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "GPU found: installing torch==$version (CUDA build)"
    "${pip[@]}" "torch==$version"
else
    echo "no GPU: installing torch==$version CPU build"
    "${pip[@]}" "torch==$version+cpu" 2>/dev/null \
        || "${pip[@]}" "torch==$version" --index-url https://download.pytorch.org/whl/cpu
fi
"$py" -c 'import torch; print("torch==" + torch.__version__)' > "$constraint"
echo "pinned $(cat "$constraint")"
