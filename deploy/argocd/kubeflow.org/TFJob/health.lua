-- Argo CD health of a Kubeflow kubeflow.org/v1 TFJob, from the status that
-- training-operator v1 writes and kubetrain's operator writes the same way
-- (--tfjob; docs/migrating-from-tfjob.md). Installed with
-- deploy/argocd/argocd-cm.yaml, where it takes precedence over any check Argo
-- CD ships for the kind. v1 keeps every condition it ever set (Created stays
-- True), turns Running False on Succeeded or Failed, and lets Running and
-- Restarting replace each other, so the first True condition of
--   Succeeded -> Healthy; Failed -> Degraded; Suspended -> Suspended;
--   Restarting, Running, Created -> Progressing
-- decides, its reason and message (v1's) the message.
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
if c.Succeeded ~= nil then return say("Healthy", c.Succeeded, "the TFJob succeeded") end
if c.Failed ~= nil then return say("Degraded", c.Failed, "the TFJob failed") end
if c.Suspended ~= nil then return say("Suspended", c.Suspended, "the TFJob is suspended") end
if c.Restarting ~= nil then return say("Progressing", c.Restarting, "replicas are restarting") end
if c.Running ~= nil then return say("Progressing", c.Running, "the TFJob is running") end
if c.Created ~= nil then return say("Progressing", c.Created, "the TFJob's pods are being created") end
return hs
