"""The served models: which engine serves each name, and who may use it.

Modules::

    upstream_config  UpstreamModel: one configured row, served name -> its engine
    table            Upstream / upstreams(settings): the rows at run time (engine status,
                     session, chat URL)
    engine_client    make_session: the shared aiohttp session; upstream error mapping
    engine_refusal   the answers while a model's engine is down (503)
    access           per-key and per-group model allow-lists (403 ``model_not_allowed``)
    quirks           engine quirks as data: request features an engine build cannot survive

May import: :mod:`appliance.gateway.errors`, :mod:`appliance.gateway.settings`,
:mod:`appliance.gateway.auth.keystore` (key entries), :mod:`appliance.engine` (``EngineStatus``);
never the HTTP side, the chat handler or the state.
"""
