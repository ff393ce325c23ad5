from .sync_batchnorm import SyncBatchNorm
