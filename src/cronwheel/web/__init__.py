"""What the HTTP API and the dashboard share: who is asking (bearer tokens, the
session cookie, principals) and the one error shape. Neither imports the other."""
