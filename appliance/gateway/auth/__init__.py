"""Who is calling and from where: API keys, OIDC tokens, client certificates, tenants.

Modules::

    authenticate    authenticate: bearer key, OIDC token or mapped client certificate ->
                    a key entry, or 401
    keystore        KeyStore / KeyEntry: the accepted keys, their ids and limits
    oidc            OidcVerifier: an identity provider's signed token -> a key entry
    tls             TlsEndpoint: the listener's SSLContext, SIGHUP reload, client-cert ids
    source_address  SourcePolicy: source-address allow-lists (403 ``source_not_allowed``)
    tenant          tenant_id / cache_salt: who a request belongs to, the engine cache salt

May import: :mod:`appliance.gateway.errors`, :mod:`appliance.gateway.settings`,
:mod:`appliance.gateway.telemetry.metrics` (the audit log), :mod:`appliance.config`,
:mod:`appliance.preflight` (TLS file checks); never the HTTP side, the chat handler or the
state.
"""
