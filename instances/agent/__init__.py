"""instances/agent/: the host agent, a program of its own. portal_agent.py runs on every host
(cloud-init installs it, instances/lib/agent.py writes that cloud-config); it uses the standard
library only and imports nothing of the portal. The portal reads it as a file and never imports
it; it ships in the package like any module."""
