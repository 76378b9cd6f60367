# short first job on 3 tasks, then continue with the full 4-task job once it succeeded
a=$(sbatch --parsable --ntasks=3 job.sbatch --set train.epochs=1 --set train.global_batch_size=48)
b=$(sbatch --parsable --dependency=afterok:$a job.sbatch)
echo $a $b
