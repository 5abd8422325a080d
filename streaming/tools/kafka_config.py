"""The server.properties of one node of a local KafkaCluster (kafka_cluster.py): listeners,
quorum voters through the relays, SASL, and the small thread counts six JVMs on two cores need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.tools.embedded import LOOPBACK

if TYPE_CHECKING:
    from streaming.tools.kafka_cluster import KafkaCluster, KafkaNode


def node_properties(cluster: KafkaCluster, node: KafkaNode) -> dict[str, object]:
    """Brokers reach the controllers only through their relays. A broker learns controller
    addresses from controller.quorum.voters and from raft responses (KIP-853's NodeEndpoints:
    the leader's *advertised* address on the listener the request came in on). Were that the
    controller's real port, the broker would reconnect there, past its relay, after any
    dropped connection (seen on 4.1.2). So each controller has a listener per broker
    (RELAYED_<broker>) advertised at that broker's relay, and a broker knows only its own."""
    relayed = {b: f"RELAYED_{b}" for b in cluster.broker_ids}
    config: dict[str, object] = {
        "node.id": node.node_id,
        "process.roles": node.role,
        "listener.security.protocol.map": ",".join(
            [f"{name}:PLAINTEXT" for name in ["CONTROLLER", "PLAINTEXT", *relayed.values()]]
            + (["SASL:SASL_PLAINTEXT"] if cluster.sasl_users else [])),
        "log.dirs": node.dir / "data",
        # a few threads per JVM: up to six JVMs share two cores
        "num.network.threads": 2, "num.io.threads": 2, "background.threads": 2,
    }
    if node.role == "controller":
        links = {relayed[b]: port for b, port in node.link_ports.items()}
        at_relays = {relayed[b]: cluster.node(b).relays[node.node_id].port for b in cluster.broker_ids}
        config.update({
            "controller.quorum.voters": ",".join(f"{c}@{cluster.node(c).address}" for c in cluster.controller_ids),
            # the first name is the quorum's own: controllers talk to each other directly
            "controller.listener.names": ",".join(["CONTROLLER", *links]),
            "listeners": ",".join([f"CONTROLLER://{node.address}",
                                   *(f"{n}://{LOOPBACK}:{p}" for n, p in links.items())]),
            "advertised.listeners": ",".join([f"CONTROLLER://{node.address}",
                                              *(f"{n}://{LOOPBACK}:{p}" for n, p in at_relays.items())]),
            **cluster.controller_overrides,
        })
    else:
        relays = cluster.node(node.node_id).relays  # a duplicate's are the original's
        replicas = min(3, len(cluster.broker_ids))
        config.update({
            "controller.quorum.voters": ",".join(f"{c}@{r.address}" for c, r in relays.items()),
            "controller.listener.names": relayed[node.node_id],
            "listeners": _client_listeners(node, node.address),
            "advertised.listeners": _client_listeners(node, node.advertised_address),
            "inter.broker.listener.name": "PLAINTEXT",
            **_sasl_config(cluster.sasl_users),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min(2, replicas),
            "group.initial.rebalance.delay.ms": 0,
            **cluster.broker_overrides,
        })
    return config


def _client_listeners(node: KafkaNode, plaintext: str) -> str:
    return ",".join([f"PLAINTEXT://{plaintext}", *([f"SASL://{node.sasl_address}"] if node.sasl_port else [])])


def _sasl_config(sasl_users: dict[str, str]) -> dict[str, str]:
    if not sasl_users:
        return {}
    users = " ".join(f'user_{user}="{password}"' for user, password in sasl_users.items())
    return {"sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"}
