--[[
slurm-supervisor: plain `sbatch`, supervised (docs/plain-sbatch.md).

Slurm runs this file inside every sbatch, salloc and srun, as the user who runs it
(CliFilterPlugins=cli_filter/lua in slurm.conf; the file is cli_filter.lua beside
slurm.conf). For a batch job of a user who is opted in, it leaves a note once Slurm has
given the job its id: an empty file named `<job id>.<pid>.<time>` in the user's own
folder SPOOL/notes/<uid>. The supervisor (a root slurm-supervisord with
`[plain_sbatch] enabled = true`) adopts the job from there, as the folder's user, with the
script Slurm keeps.

Why opening the note with io.open(..., "w") is safe here, though Lua 5.1 can neither
refuse a symbolic link (O_NOFOLLOW) nor create exclusively (O_EXCL), and "w" would block
on a FIFO and truncate what a link names: the only folder it writes into is
SPOOL/notes/<its own uid>, which only the daemon creates (SPOOL/notes is the daemon's,
mode 0755: no user can create, rename or remove anything in it), owned by that uid, mode
0700. So nobody but the user (and root) can put a name there ahead of time: a link or a
FIFO in it can only be the user's own. The filter writes nothing unless the daemon has
published this layout (the line "notes per-user" in SPOOL/default, a file only the daemon
writes): an older daemon's SPOOL/notes, where anyone could create names, is never written
into. No folder (a user the site opts in whom the daemon has not met yet) means no note
(docs/plain-sbatch.md).

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

-- The site's default (its first line) and whether the notes go into per-user folders
-- (a line "notes per-user"), from SPOOL/default.
local function site_default()
	local f = io.open(SPOOL .. "/default", "r")
	if not f then
		return nil, false
	end
	local site = f:read("*l")
	local per_user = false
	for line in f:lines() do
		if line == "notes per-user" then
			per_user = true
		end
	end
	f:close()
	return site, per_user
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
	local site, per_user = site_default()
	if not per_user then
		-- Not a spool this filter may write into (see above).
		return false
	end
	local own = first_line(SPOOL .. "/optin/" .. who.uid)
	if own == "in" then
		return true
	elseif own == "out" then
		return false
	end
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
		-- Only into the user's own folder, which only the daemon makes (see above).
		local name = id .. "." .. who.pid .. "." .. tostring(os.time())
		local f = io.open(SPOOL .. "/notes/" .. who.uid .. "/" .. name, "w")
		if f then
			f:close()
		end
	end)
	return slurm.SUCCESS
end
