--[[
slurm-supervisor: plain `sbatch`, supervised (docs/plain-sbatch.md).

Slurm runs this file inside every sbatch, salloc and srun, as the user who runs it
(CliFilterPlugins=cli_filter/lua in slurm.conf; the file is cli_filter.lua beside
slurm.conf). For a batch job of a user who is opted in, it leaves a note once Slurm has
given the job its id: an empty file named `<job id>.<pid>.<time>` in SPOOL/notes. The
supervisor (a root slurm-supervisord with `[plain_sbatch] enabled = true`) adopts the
job from there, as the note's owner, with the script Slurm keeps.

It never changes a submission, never asks the daemon anything and never fails one: a
missing spool, a daemon that is down, anything unexpected, and sbatch goes on exactly as
without this file. Who is opted in it learns from files the daemon publishes in SPOOL
(`optin/<uid>`: "in" or "out"; `default`: "everyone", "none" or "groups GID..."); the
daemon checks again itself, so nothing here is a security boundary.

A user leaves one submission unsupervised with SLURM_SUPERVISOR=off in sbatch's
environment (`SLURM_SUPERVISOR=off sbatch job.sh`). It writes nothing on sbatch's stdout
or stderr, ever: a job the daemon will not supervise (a job array, a heterogeneous job)
gets its note all the same, and the daemon records why it refused it, which its owner
sees with `supervisorctl status JOBID`.

Written for Lua 5.1 (Debian's Slurm 22.05 and 24.11 link liblua5.1).
--]]

-- Where the daemon keeps the spool: its `[plain_sbatch] spool` (by default
-- `<state_dir>/plain-sbatch`, /var/lib/slurm-supervisor/plain-sbatch with the package).
local SPOOL = "/var/lib/slurm-supervisor/plain-sbatch"

-- What pre_submit found, for post_submit (the same process, the same Lua state).
local wanted = false

local function first_line(path)
	local f = io.open(path, "r")
	if not f then
		return nil
	end
	local line = f:read("*l")
	f:close()
	return line
end

-- This process's uid, groups and pid, from the kernel (never from the environment).
local function me()
	local f = io.open("/proc/self/status", "r")
	if not f then
		return nil
	end
	local who = { groups = {} }
	for line in f:lines() do
		local key, value = line:match("^(%a+):%s*(.*)$")
		if key == "Pid" then
			who.pid = value:match("^(%d+)")
		elseif key == "Uid" then
			who.uid = value:match("^(%d+)")
		elseif key == "Gid" then
			local gid = value:match("^(%d+)")
			if gid then
				who.groups[gid] = true
			end
		elseif key == "Groups" then
			for g in value:gmatch("%d+") do
				who.groups[g] = true
			end
		end
	end
	f:close()
	return who
end

local function opted_in(who)
	local own = first_line(SPOOL .. "/optin/" .. who.uid)
	if own == "in" then
		return true
	elseif own == "out" then
		return false
	end
	local site = first_line(SPOOL .. "/default")
	if site == "everyone" then
		return true
	elseif site and site:sub(1, 7) == "groups " then
		for g in site:sub(8):gmatch("%d+") do
			if who.groups[g] then
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
	v = v:lower()
	return v == "off" or v == "no" or v == "0" or v == "false"
end

function slurm_cli_setup_defaults(options, early_pass)
	return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
	if options["type"] ~= "sbatch" then
		return slurm.SUCCESS
	end
	if offset ~= 0 then
		-- A later component of a heterogeneous job: the note is the first one's.
		return slurm.SUCCESS
	end
	wanted = false
	local ok, result = pcall(function()
		if off(os.getenv("SLURM_SUPERVISOR")) then
			return false
		end
		local who = me()
		return who ~= nil and who.uid ~= nil and opted_in(who)
	end)
	wanted = ok and result == true
	return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
	if offset ~= 0 or not wanted then
		return slurm.SUCCESS
	end
	wanted = false
	pcall(function()
		local who = me()
		local id = tostring(job_id)
		if not id:match("^%d+$") or who == nil or who.pid == nil then
			return
		end
		local f = io.open(SPOOL .. "/notes/" .. id .. "." .. who.pid .. "." .. tostring(os.time()), "w")
		if f then
			f:close()
		end
	end)
	return slurm.SUCCESS
end
