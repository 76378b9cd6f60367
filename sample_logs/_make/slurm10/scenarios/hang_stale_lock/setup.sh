# leftover from an earlier job on "node 1" that was killed while staging shards
mkdir -p scratch/node1/shards
echo 48213 > scratch/node1/shards/.staging.lock
