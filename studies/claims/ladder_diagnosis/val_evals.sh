#!/bin/bash
export HF_HUB_OFFLINE=1 TF_CPP_MIN_LOG_LEVEL=3  # from the repository root, in the venv
for s in 0 1 2 3; do for c in triplet ladder_adaptive_truth sam_truth; do
  python -m kitm.eval --run_dir=studies/claims/runs/$c/seed_$s --split=val --relevance=truth --fold_images=100 --out=studies/claims/ladder_diagnosis/out/val_${c}_$s.json --no-progress > studies/claims/ladder_diagnosis/out/val_${c}_$s.log 2>&1 || echo "fail $c $s"
done; done
echo done
