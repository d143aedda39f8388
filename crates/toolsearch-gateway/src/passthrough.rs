//! What MCP carries besides tools, passed between the sessions and the upstreams: prompts
//! (listed, got and completed under their namespaced names), resources and resource templates
//! (under gateway URIs, `toolsearch://<server>/<uri>`), resource subscriptions (one upstream
//! subscription per resource, whatever the number of sessions), logging levels and roots. Every
//! request is judged by the session's scope first; a name or URI it does not allow is unknown.

use std::sync::Arc;

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Reference, Resource, ResourceTemplate,
    SubscribeRequestParams,
};
#[allow(deprecated)] // logging: still what 2025-11-25 clients and servers speak
use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use rmcp::service::RoleClient;
use rmcp::Peer;
use serde_json::Value;
use toolsearch_core::{Naming, ToolId};

use crate::error::{GatewayError, Result};
use crate::relay::{CallOrigin, Downstream};
use crate::resources;
use crate::rest::SharedEngine;
use crate::session::{SessionRef, Sessions};
use crate::upstream::supervisor::{service_error_text, UpstreamManager};

/// The pass-through of one gateway: its upstreams, and the engine whose naming turns an
/// upstream's names into public ones.
pub(crate) struct Passthrough {
    upstreams: UpstreamManager,
    engine: SharedEngine,
    /// The sessions' log levels, and how to reach them.
    sessions: Arc<Sessions>,
}

impl Passthrough {
    pub fn new(
        upstreams: &UpstreamManager,
        engine: &SharedEngine,
        sessions: &Arc<Sessions>,
    ) -> Self {
        Self {
            upstreams: upstreams.clone(),
            engine: engine.clone(),
            sessions: sessions.clone(),
        }
    }

    fn naming(&self) -> Naming {
        self.engine
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .naming()
            .clone()
    }

    /// Every ready upstream's prompts that the session's scope allows, named as tools are
    /// (`server___prompt`, the scope's patterns read the same way). An upstream that offers no
    /// prompts, is down, or does not answer in the call timeout adds none (and is logged).
    pub async fn list_prompts(&self, session: &SessionRef) -> Vec<Prompt> {
        let scope = &session.scope;
        let naming = self.naming();
        let mut all = Vec::new();
        for server in self.upstreams.servers() {
            let Ok(peer) = self.upstreams.ready_peer(&server) else {
                continue;
            };
            let offers = peer
                .peer_info()
                .is_some_and(|info| info.capabilities.prompts.is_some());
            if !offers {
                continue;
            }
            let listed =
                tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_prompts()).await;
            let prompts = match listed {
                Ok(Ok(prompts)) => prompts,
                Ok(Err(e)) => {
                    let error = service_error_text(&e);
                    tracing::warn!(
                        server,
                        error,
                        "prompts/list failed; its prompts are left out"
                    );
                    continue;
                }
                Err(_) => {
                    tracing::warn!(server, "prompts/list timed out; its prompts are left out");
                    continue;
                }
            };
            for mut prompt in prompts {
                let id = ToolId::new(server.as_str(), prompt.name.as_str());
                if scope.allows(&id, &naming) {
                    prompt.name = naming.public_name(&id);
                    all.push(prompt);
                }
            }
        }
        all
    }

    /// `prompts/get` of a namespaced prompt, on its upstream, if the session's scope allows it.
    pub async fn get_prompt(
        &self,
        session: &SessionRef,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> Result<GetPromptResult> {
        let (server, prompt) = self.prompt_target(session, name)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let mut params = GetPromptRequestParams::new(prompt.as_str());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let failed = |message: String| GatewayError::PromptFailed {
            server: server.clone(),
            prompt: prompt.clone(),
            message,
        };
        let in_flight = self
            .upstreams
            .relay()
            .begin_call(&server, &CallOrigin::new(&session.id, None));
        let outcome =
            tokio::time::timeout(self.upstreams.call_timeout(), peer.get_prompt(params)).await;
        if upstream_answered(&outcome) {
            in_flight.answered();
        }
        match outcome {
            Ok(Ok(mut result)) => {
                resources::rewrite_prompt_result(&mut result, &server);
                Ok(result)
            }
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer in {}s (toolSearch.callTimeoutSecs)",
                self.upstreams.call_timeout().as_secs_f64()
            ))),
        }
    }

    /// `completion/complete` for an argument of a namespaced prompt or of a gateway resource
    /// template, on its upstream (an upstream that offers no completions gives none).
    pub async fn complete(
        &self,
        session: &SessionRef,
        mut request: CompleteRequestParams,
    ) -> Result<CompleteResult> {
        let (server, upstream_name) = match &mut request.r#ref {
            Reference::Prompt(prompt) => {
                let (server, upstream_name) = self.prompt_target(session, &prompt.name)?;
                prompt.name = upstream_name.clone();
                (server, upstream_name)
            }
            Reference::Resource(resource) => {
                let (server, uri) = self.resource_target(session, &resource.uri)?;
                resource.uri = uri.clone();
                (server, uri)
            }
            _ => return Ok(CompleteResult::default()),
        };
        let peer = self.upstreams.ready_peer(&server)?;
        let offers = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.completions.is_some());
        if !offers {
            return Ok(CompleteResult::default());
        }
        match tokio::time::timeout(self.upstreams.call_timeout(), peer.complete(request)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(GatewayError::PromptFailed {
                server,
                prompt: upstream_name,
                message: format!("completion failed: {e}"),
            }),
            Err(_) => Err(GatewayError::PromptFailed {
                server,
                prompt: upstream_name,
                message: "completion timed out (toolSearch.callTimeoutSecs)".into(),
            }),
        }
    }

    /// The server and upstream name of a namespaced prompt the session may use.
    fn prompt_target(&self, session: &SessionRef, name: &str) -> Result<(String, String)> {
        // Before any matching: scope patterns are matched against the name.
        toolsearch_core::check_name_length(name, "prompt")?;
        let scope = &session.scope;
        let naming = self.naming();
        let id = naming.parse(name);
        if id.server.is_empty()
            || !self.upstreams.servers().contains(&id.server)
            || !scope.allows(&id, &naming)
        {
            return Err(GatewayError::UnknownPrompt {
                name: name.to_string(),
                separator: naming.separator().to_string(),
            });
        }
        Ok((id.server, id.name))
    }

    /// The server and canonical upstream URI of a gateway resource URI the session may use. The
    /// scope is asked about the canonical form, and only that form goes upstream, so that `..`,
    /// `%2e%2e` or `\` cannot name to the server what the scope did not allow. A URI that has no
    /// canonical form is answered as an unknown one, so that nothing leaks.
    fn resource_target(&self, session: &SessionRef, uri: &str) -> Result<(String, String)> {
        let unknown = || GatewayError::UnknownResource {
            uri: uri.to_string(),
        };
        let (server, original) = resources::parse_public_uri(uri).ok_or_else(unknown)?;
        let canonical = resources::canonical_uri(&original).map_err(|reason| {
            tracing::debug!(session = %session.id, server, %reason, "resource URI refused");
            unknown()
        })?;
        let scope = &session.scope;
        let naming = self.naming();
        if !self.upstreams.servers().contains(&server)
            || !resources::in_scope(scope, &naming, &server, &canonical)
        {
            return Err(unknown());
        }
        Ok((server, canonical))
    }

    /// The ready upstreams that offer resources (and so resource templates).
    fn resource_servers(&self) -> Vec<(String, Peer<RoleClient>)> {
        self.upstreams
            .servers()
            .into_iter()
            .filter_map(|server| {
                let peer = self.upstreams.ready_peer(&server).ok()?;
                let offers = peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.resources.is_some());
                offers.then_some((server, peer))
            })
            .collect()
    }

    /// Every ready upstream's resources that the session's scope allows (a resource counts as
    /// `server:<its uri>` for the scope's patterns), under gateway URIs. An upstream that fails or
    /// does not answer in the call timeout adds none (and is logged).
    pub async fn list_resources(&self, session: &SessionRef) -> Vec<Resource> {
        let scope = &session.scope;
        let naming = self.naming();
        let mut all = Vec::new();
        for (server, peer) in self.resource_servers() {
            let listed =
                tokio::time::timeout(self.upstreams.call_timeout(), peer.list_all_resources())
                    .await;
            let Some(listed) = upstream_list(&server, "resources/list", listed) else {
                continue;
            };
            for mut resource in listed {
                // Listed as reading it would be judged: by its canonical form.
                let in_scope = resources::canonical_uri(&resource.uri).is_ok_and(|canonical| {
                    resources::in_scope(scope, &naming, &server, &canonical)
                });
                if in_scope {
                    resource.uri = resources::public_uri(&server, &resource.uri);
                    all.push(resource);
                }
            }
        }
        all
    }

    /// Every ready upstream's resource templates the session's scope allows, under gateway URIs.
    pub async fn list_resource_templates(&self, session: &SessionRef) -> Vec<ResourceTemplate> {
        let scope = &session.scope;
        let naming = self.naming();
        let mut all = Vec::new();
        for (server, peer) in self.resource_servers() {
            let listed = tokio::time::timeout(
                self.upstreams.call_timeout(),
                peer.list_all_resource_templates(),
            )
            .await;
            let Some(listed) = upstream_list(&server, "resources/templates/list", listed) else {
                continue;
            };
            for mut template in listed {
                let id = ToolId::new(server.as_str(), template.uri_template.as_str());
                if scope.allows(&id, &naming) {
                    template.uri_template = resources::public_uri(&server, &template.uri_template);
                    all.push(template);
                }
            }
        }
        all
    }

    /// `resources/read` of a gateway URI, on its upstream; URIs in the contents are gateway URIs.
    pub async fn read_resource(
        &self,
        session: &SessionRef,
        uri: &str,
    ) -> Result<ReadResourceResult> {
        let (server, original) = self.resource_target(session, uri)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let failed = |message: String| GatewayError::ResourceFailed {
            server: server.clone(),
            uri: original.clone(),
            action: "read",
            message,
        };
        let in_flight = self
            .upstreams
            .relay()
            .begin_call(&server, &CallOrigin::new(&session.id, None));
        let read = peer.read_resource(ReadResourceRequestParams::new(original.as_str()));
        let outcome = tokio::time::timeout(self.upstreams.call_timeout(), read).await;
        if upstream_answered(&outcome) {
            in_flight.answered();
        }
        match outcome {
            Ok(Ok(mut result)) => {
                resources::rewrite_read_result(&mut result, &server);
                Ok(result)
            }
            Ok(Err(e)) => Err(failed(e.to_string())),
            Err(_) => Err(failed(format!(
                "no answer in {}s (toolSearch.callTimeoutSecs)",
                self.upstreams.call_timeout().as_secs_f64()
            ))),
        }
    }

    /// Subscribes the session to a resource's updates. The gateway holds one upstream
    /// subscription per resource, whatever the number of sessions subscribed to it.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    pub async fn subscribe(&self, session: &SessionRef, uri: &str) -> Result<()> {
        let (server, original) = self.resource_target(session, uri)?;
        let peer = self.upstreams.ready_peer(&server)?;
        let offers = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !offers {
            return Err(GatewayError::ResourceFailed {
                server,
                uri: original,
                action: "subscribe to",
                message: "the server does not offer subscriptions".into(),
            });
        }
        let relay = self.upstreams.relay();
        if relay.subscribe(&session.id, &server, &original) {
            let subscribed = tokio::time::timeout(
                self.upstreams.call_timeout(),
                peer.subscribe(SubscribeRequestParams::new(original.as_str())),
            )
            .await;
            let message = match subscribed {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("no answer in the call timeout".to_string()),
            };
            if let Some(message) = message {
                relay.unsubscribe(&session.id, &server, &original);
                return Err(GatewayError::ResourceFailed {
                    server,
                    uri: original,
                    action: "subscribe to",
                    message,
                });
            }
        }
        tracing::debug!(session = %session.id, server, uri = original, "subscribed");
        Ok(())
    }

    /// Ends the session's subscription; the upstream one ends with the last session's.
    pub async fn unsubscribe(&self, session: &SessionRef, uri: &str) -> Result<()> {
        let (server, original) = self.resource_target(session, uri)?;
        if self
            .upstreams
            .relay()
            .unsubscribe(&session.id, &server, &original)
        {
            self.upstreams.unsubscribe(&server, &original).await;
        }
        Ok(())
    }

    /// `logging/setLevel` of a session: it gets the upstreams' log messages of that level and
    /// above. Each upstream that offers logging is set to the most verbose level any session
    /// asked for; the gateway filters per session.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    pub async fn set_log_level(&self, session: &SessionRef, level: LoggingLevel) {
        let upstream_level = self.sessions.set_log_level(&session.id, level);
        for server in self.upstreams.servers() {
            self.set_upstream_log_level(&server, upstream_level).await;
        }
    }

    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    async fn set_upstream_log_level(&self, server: &str, level: LoggingLevel) {
        let Ok(peer) = self.upstreams.ready_peer(server) else {
            return;
        };
        let offers = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.logging.is_some());
        if !offers {
            return;
        }
        let set = peer.set_level(SetLevelRequestParams::new(level));
        match tokio::time::timeout(self.upstreams.call_timeout(), set).await {
            Ok(Ok(())) => tracing::debug!(server, ?level, "upstream log level set"),
            Ok(Err(e)) => {
                let error = service_error_text(&e);
                tracing::warn!(server, error, "logging/setLevel failed");
            }
            Err(_) => tracing::warn!(server, "logging/setLevel timed out"),
        }
    }

    /// A client's `notifications/roots/list_changed`, passed to every ready upstream.
    pub async fn roots_changed(&self) {
        for server in self.upstreams.servers() {
            if let Ok(peer) = self.upstreams.ready_peer(&server) {
                if let Err(e) = peer.notify_roots_list_changed().await {
                    tracing::debug!(server, error = %e, "cannot send roots/list_changed");
                }
            }
        }
    }

    /// After an upstream (re)started: its resource subscriptions and log level as the sessions
    /// left them.
    #[allow(deprecated)] // logging and resources/subscribe: still what 2025-11-25 servers speak
    pub async fn restore_upstream(&self, server: &str) {
        if let Some(level) = self.sessions.log_level() {
            self.set_upstream_log_level(server, level).await;
        }
        let uris = self.upstreams.relay().subscribed(server);
        let Ok(peer) = self.upstreams.ready_peer(server) else {
            return;
        };
        for uri in uris {
            let again = peer.subscribe(SubscribeRequestParams::new(uri.as_str()));
            match tokio::time::timeout(self.upstreams.call_timeout(), again).await {
                Ok(Ok(())) => tracing::debug!(server, uri, "subscription restored"),
                _ => tracing::warn!(server, uri, "cannot restore a resource subscription"),
            }
        }
    }

    /// Sends `notifications/resources/list_changed` to every session the gateway can reach.
    pub async fn notify_resources_changed(&self, server: &str) {
        let links = self.sessions.links();
        tracing::debug!(server, sessions = links.len(), "resources changed upstream");
        for link in links {
            if let Err(e) = link.peer.notify_resource_list_changed().await {
                tracing::debug!(session = link.session, error = %e, "cannot send resources/list_changed");
            }
        }
    }
}

/// What an upstream listed, or `None` (logged) when it failed or timed out.
pub(crate) fn upstream_list<T>(
    server: &str,
    method: &str,
    listed: std::result::Result<
        std::result::Result<Vec<T>, rmcp::ServiceError>,
        tokio::time::error::Elapsed,
    >,
) -> Option<Vec<T>> {
    match listed {
        Ok(Ok(items)) => Some(items),
        Ok(Err(e)) => {
            let error = service_error_text(&e);
            tracing::warn!(server, error, "{method} failed; its items are left out");
            None
        }
        Err(_) => {
            tracing::warn!(server, "{method} timed out; its items are left out");
            None
        }
    }
}

/// Whether an upstream request ended with the upstream's answer (a result or an MCP error), so
/// that nothing more of it can arrive; not on a timeout or a broken connection.
pub(crate) fn upstream_answered<T>(
    outcome: &std::result::Result<
        std::result::Result<T, rmcp::ServiceError>,
        tokio::time::error::Elapsed,
    >,
) -> bool {
    matches!(
        outcome,
        Ok(Ok(_)) | Ok(Err(rmcp::ServiceError::McpError(_)))
    )
}
