#!/bin/bash
# One short visit to a lent GPU machine (issues 35 item 5 and 36 item 4), prepared to run as one device command:
#   aidai collect --script eval/gpu_visit/aidai_collect.py   # here, first (ignored by git: name it in `carry`)
#   bash eval/gpu_visit/run.sh                                # there, with $OUT set by the device tool (~5 min)
# It collects a host bundle of the healthy GPU, provokes two application faults (Xid 43, Xid 31), collects again,
# and records 60 s of clean and 150 s of anomalous GPU telemetry. Nothing changes the GPU's settings. Back here:
# strip the kernel command line from the bundles' kernel logs before committing them.
set -x
mkdir -p "$OUT"
nvidia-smi -L; nproc; free -g
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 130 python3 eval/gpu_visit/aidai_collect.py --timeout 100 --out "$OUT/bundle-healthy.tar.gz"; echo "rc $?"
timeout 90 python3 eval/gpu_visit/gpu_faults.py oob > "$OUT/app_torch_index_oob.txt" 2>&1; echo "rc $?"
timeout 90 python3 eval/gpu_visit/gpu_faults.py wild > "$OUT/app_triton_wild_store.txt" 2>&1; echo "rc $?"
sleep 2
timeout 130 python3 eval/gpu_visit/aidai_collect.py --timeout 100 --out "$OUT/bundle-after-faults.tar.gz"; echo "rc $?"
dmesg -T 2>&1 | grep -i -E "xid|nvrm" | tail -40 > "$OUT/xid_lines.txt"
timeout 110 python3 eval/gpu_visit/gpu_telemetry.py "$OUT/tele-clean" 60; echo "rc $?"
timeout 260 python3 eval/gpu_visit/gpu_telemetry.py "$OUT/tele-anomalies" 150 second_process:35:25 \
    all_cores_busy:75:20 host_memory:110:20; echo "rc $?"
ls -la "$OUT" "$OUT"/tele-*
