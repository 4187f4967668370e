-- Argo CD health of a kubetrain.io TrainingSweep, from the operator's status.
-- Installed with deploy/argocd/argocd-cm.yaml (docs/operations.md, "GitOps with
-- Argo CD"). Argo CD runs it with `obj`, the object, and reads the table it returns.
--   Succeeded (the goal reached, or every trial final with one success) ->
--   Healthy; Failed (too many failed trials, none succeeded, an invalid spec) ->
--   Degraded; Suspended -> Suspended; otherwise Progressing, with how many
--   trials run and finished.
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
if c.Succeeded ~= nil then return say("Healthy", c.Succeeded, "the sweep succeeded") end
if c.Failed ~= nil then return say("Degraded", c.Failed, "the sweep failed") end
if c.Suspended ~= nil then return say("Suspended", c.Suspended, "the sweep is suspended") end
if c.Running ~= nil then return say("Progressing", c.Running, "trials are running") end
return say("Progressing", c.Created, "the sweep's trials are being created")
