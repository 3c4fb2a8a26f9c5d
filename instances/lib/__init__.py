"""Small helpers of the instances app that hold no rows and no rules of their own: cron
expressions in words and time zones (cron), SSH public key checks (sshkeys), where an order's
hosts keep checkpoints (checkpoints), the cloud-init that installs the host agent (agent) and
whether a cloud tag holds one of the portal's ids (ids)."""
