# an interrupted copy left train-00001.npy truncated
truncate -s $(( $(stat -c %s data/train-00001.npy) * 55 / 100 )) data/train-00001.npy
