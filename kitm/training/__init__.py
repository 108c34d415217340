"""kitm.training: how a model is trained beyond its losses. No imports here: import the submodules.

distribution      strategies (one device, MirroredStrategy, MultiWorkerMirroredStrategy from TF_CONFIG), the
                  per-replica input pipelines, the chief and the other workers' output directories (JAX's devices:
                  kitm.distribute.data_parallel)
fault_tolerance   BackupAndRestore that resumes a killed run mid-epoch, writes atomically and never backs up NaNs
reproducibility   seeds and TensorFlow's op determinism
schedules         learning-rate schedules (step decay, warm-up + cosine)
finetune          fine-tuning the image backbone after a frozen phase
precision         mixed-precision policies
center_phases     the semantic centers' three training phases (Malali & Keller) (several `fit` calls)
"""
