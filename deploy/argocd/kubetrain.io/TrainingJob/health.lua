-- Argo CD health of a kubetrain.io TrainingJob, from the operator's status.
-- Installed with deploy/argocd/argocd-cm.yaml (docs/operations.md, "GitOps with
-- Argo CD"). Argo CD runs it with `obj`, the object, and reads the table it returns.
--   Succeeded -> Healthy; Failed -> Degraded; Suspended (by its spec or by
--   Kueue) -> Suspended; the apiserver refuses its pods (CreateRefused) ->
--   Degraded (Pod Security, RBAC, a name taken: nothing changes until someone
--   acts), except QuotaExceeded -> Progressing (it waits for quota like an
--   unschedulable pod waits for room); otherwise Progressing, with the reason
--   a job does not run yet (CannotStart, Unschedulable) or is restarting in the
--   message.
local hs = { status = "Progressing", message = "waiting for the operator to report" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
local c = {}
for _, cond in ipairs(obj.status.conditions) do
  if cond.type ~= nil and cond.status == "True" then
    c[cond.type] = cond
  end
end
local function say(status, cond, fallback)
  hs.status = status
  hs.message = fallback
  if cond ~= nil and cond.message ~= nil and cond.message ~= "" then
    hs.message = cond.message
    if cond.reason ~= nil and cond.reason ~= "" then
      hs.message = cond.reason .. ": " .. cond.message
    end
  end
  return hs
end
if c.Succeeded ~= nil then return say("Healthy", c.Succeeded, "the job succeeded") end
if c.Failed ~= nil then return say("Degraded", c.Failed, "the job failed") end
if c.Suspended ~= nil then return say("Suspended", c.Suspended, "the job is suspended") end
if c.CreateRefused ~= nil then
  local status = "Degraded"
  if c.CreateRefused.reason == "QuotaExceeded" then status = "Progressing" end
  return say(status, c.CreateRefused, "the apiserver refuses the job's pods")
end
if c.CannotStart ~= nil then return say("Progressing", c.CannotStart, "pods cannot start") end
if c.Unschedulable ~= nil then return say("Progressing", c.Unschedulable, "pods are unschedulable") end
if c.Restarting ~= nil then return say("Progressing", c.Restarting, "replicas are restarting") end
if c.Running ~= nil then return say("Progressing", c.Running, "every replica is running") end
return say("Progressing", c.Created, "the job's pods are being created")
