--[[
slurm-supervisor's job_submit script (docs/plain-sbatch.md, "The tamper-proof mark"):
slurmctld runs it for every submission (JobSubmitPlugins=lua; the file is job_submit.lua
beside slurm.conf; slurmctld reads it again when it changes).

For a batch job of a user who is opted in, it sets the job's admin_comment to MARK, the
tamper-proof twin of the cli_filter's note: users cannot set or change an admin_comment,
slurmctld sets it whatever client or login node the job came from, and accounting keeps
it. A root slurm-supervisord with `[plain_sbatch] admin_comment = true` lists the marked
jobs once a poll period (one squeue for all of them) and supervises each as its owner.

Who is opted in it learns as the filter does, from the files the daemon publishes in its
spool (`optin/<uid>`: "in" or "out"; `default`: "everyone", "none" or "groups GID..."):
the controller must read them (the daemon on the controller's host, or its spool on a
filesystem both see). A site default of groups is matched against the job's group (its
primary group, or --gid); members of a listed group by another of their groups are
marked by the filter's notes only. SLURM_SUPERVISOR=off in sbatch's environment leaves
one job unmarked.

It never refuses or changes anything else, and never fails a submission: anything
unexpected (no spool, an unreadable file, an admin_comment already set by the site)
leaves the job exactly as submitted. Nothing of the user's is put in the mark.

Written for Lua 5.1 (Debian's Slurm 22.05 and 24.11 link liblua5.1).
--]]

-- The daemon's spool: its `[plain_sbatch] spool` (by default `<state_dir>/plain-sbatch`,
-- /var/lib/slurm-supervisor/plain-sbatch with the package), as the controller sees it.
local SPOOL = "/var/lib/slurm-supervisor/plain-sbatch"

-- The mark, exactly as the daemon looks for it (src/daemon/plain.rs, MARK).
local MARK = "slurm-supervisor:plain"

-- Seconds a file's first line is kept: slurmctld runs this with its locks held, so a
-- burst of submissions reads each file once, and a choice takes effect within them.
local KEEP = 2

local kept = {}

local function first_line(path)
	local now = os.time()
	local k = kept[path]
	if k and now - k.at < KEEP then
		return k.line
	end
	local line = nil
	local f = io.open(path, "r")
	if f then
		line = f:read("*l")
		f:close()
	end
	kept[path] = { at = now, line = line }
	return line
end

local function opted_in(uid, gid)
	local own = first_line(SPOOL .. "/optin/" .. uid)
	if own == "in" then
		return true
	elseif own == "out" then
		return false
	end
	local site = first_line(SPOOL .. "/default")
	if site == "everyone" then
		return true
	elseif site and site:sub(1, 7) == "groups " and gid then
		for g in site:sub(8):gmatch("%d+") do
			if g == gid then
				return true
			end
		end
	end
	return false
end

local function off(v)
	if v == nil then
		return false
	end
	v = string.lower(tostring(v))
	return v == "off" or v == "no" or v == "0" or v == "false"
end

local function mark(job_desc)
	-- A batch job only (salloc and srun send no script).
	if job_desc.script == nil then
		return
	end
	local current = job_desc.admin_comment
	if current ~= nil and current ~= "" then
		return
	end
	local uid = tonumber(job_desc.user_id)
	if uid == nil then
		return
	end
	local env = job_desc.environment
	if env ~= nil and off(env["SLURM_SUPERVISOR"]) then
		return
	end
	local gid = tonumber(job_desc.group_id)
	if opted_in(string.format("%d", uid), gid and string.format("%d", gid)) then
		job_desc.admin_comment = MARK
	end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	pcall(mark, job_desc)
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
