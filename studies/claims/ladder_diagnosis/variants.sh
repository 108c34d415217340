#!/bin/bash
# ladder truth-control diagnosis on the validation split (seeds 0, 1): why does t2i CS@100 fall?
export HF_HUB_OFFLINE=1 TF_CPP_MIN_LOG_LEVEL=3  # from the repository root, in the venv
COMMON="--dataset=synthetic --data_dir=tfrecords/claims_features --image_encoder=features_mlp --epochs=8 --lr_decay_epochs=6 --eval_every_epochs=0 --projector_samples=0 --eval_relevance=truth --fold_images=100 --progress=false --export=true"
LADDER="--flagfile=launch/ladder_adaptive.flags --dataset=synthetic --eval_relevance=truth --relevance=truth"
for s in 0; do  # seed 0 only was run (the seed-1 pass was stopped for time)
 for v in bounds26 hardest fixed3; do
  case $v in
   bounds26) extra="$LADDER --ladder_level_bounds=2,6";;
   hardest) extra="$LADDER --max_violation=true";;
   fixed3) extra="--loss=ladder --relevance=truth --ladder_thresholds=0.9,0.5 --ladder_margins=0.2,0.05,0.05 --ladder_betas=1,0.5,0.25";;
  esac
  rd=runs/ladder_diagnosis/${v}_s$s
  [ -f $rd/summary.json ] || python -m kitm.launch $COMMON $extra --seed=$s --run_dir=$rd > studies/claims/ladder_diagnosis/out/${v}_s$s.launch.log 2>&1 || echo "fail launch $v $s"
  python -m kitm.eval --run_dir=$rd --split=val --relevance=truth --fold_images=100 --out=studies/claims/ladder_diagnosis/out/val_${v}_$s.json --no-progress > studies/claims/ladder_diagnosis/out/val_${v}_$s.log 2>&1 || echo "fail eval $v $s"
 done
done
echo done
