"""The web board: a live view of the board in a browser, served on the daemon's own loop.

`app` builds the aiohttp application and runs its site beside the gRPC server;
`guard` holds the hardening rules every request passes; `sessions` the logins;
`snapshot` and `feed` the board as one read and as the live event stream;
`actions` the Lead's writes, through the same LeadService code as the RPCs.
"""
