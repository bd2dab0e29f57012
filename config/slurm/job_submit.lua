-- slurm-supervisor's job_submit script (docs/plain-sbatch.md): runs in slurmctld for every
-- submission. Today it changes nothing and refuses nothing; it is the place of the
-- tamper-proof mark (admin_comment) for sites that want one.

function slurm_job_submit(job_desc, part_list, submit_uid)
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

return slurm.SUCCESS
