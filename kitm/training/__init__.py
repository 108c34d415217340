"""kitm.training: how a model is trained beyond its losses.

distribution      strategies (one device, MirroredStrategy, MultiWorkerMirroredStrategy from TF_CONFIG), the
                  per-replica input pipelines, the chief and the other workers' output directories
fault_tolerance   BackupAndRestore that resumes a killed run mid-epoch, writes atomically and never backs up NaNs
reproducibility   seeds and TensorFlow's op determinism
"""
