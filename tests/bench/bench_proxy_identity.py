"""The owner proxy's identity attack, as figures: a dev cluster with authentication (ZooKeeper, two bookies,
two brokers), a consume role ``thief`` trying subscription ``locked`` - restricted to role ``victim`` with
``permissionOnSubscription`` - through the broker that does not own the topic (``tests/fixtures/
proxy_identity.py``), and an ordinary role's session on that broker.

    .venv/bin/python tests/bench/bench_proxy_identity.py [--broker-superuser]

Without a flag the cluster is exactly what ``magnetar dev-cluster --authentication-enabled`` ships (the
brokers' role ``broker`` is no superuser); ``--broker-superuser`` adds ``broker`` to the brokers'
``super_user_roles`` (what an operator had to do for the proxy to work before it forwarded the client's
credentials). Prints one JSON document: each trick's status, reason and what it read, acked and
unsubscribed, the victim's backlog afterwards, and the ordinary session's status. Run it with another tree's
interpreter (``/path/to/tree/.venv/bin/python tests/bench/bench_proxy_identity.py``) for a before/after.
Every process is stopped on exit (the dev cluster stops its own).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.proxy_identity import SecureCluster, attack, consumer_target, open_raw, set_up

from magnetar.admin.processes.dev_cluster import DevClusterSpec, open_dev_cluster


def scenario(secure: SecureCluster) -> dict[str, Any]:
    set_up(secure, "identity", messages=5)
    tricks = attack(secure, "identity")
    victim = secure.subscriptions("identity").get("locked")
    ordinary = open_raw(
        secure.non_owner("identity"), consumer_target("identity", "app-sub"), secure.token("app")
    )
    ordinary.close()
    return {
        "tricks": tricks,
        "victim_subscription": None if victim is None else {"msgBacklog": victim["msgBacklog"]},
        "ordinary_session_on_non_owner": {"status": ordinary.status, "reason": ordinary.reason},
    }


async def main(broker_superuser: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="proxy-identity-") as tmp:
        broker_env = {"MAGNETAR_SUPER_USER_ROLES": "admin,broker"} if broker_superuser else {}
        spec = DevClusterSpec(
            data_dir=Path(tmp), bookies=2, brokers=2, authentication=True, broker_env=broker_env
        )
        async with open_dev_cluster(spec) as cluster:
            secure = SecureCluster(
                brokers=list(cluster.broker_urls),
                admin_token=cluster.admin_token_file.read_text().strip(),
                key_file=str(Path(tmp) / "security" / "secret.key"),
            )
            result = await trio.to_thread.run_sync(scenario, secure)
    return {"broker_superuser": broker_superuser, **result}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker-superuser", action="store_true")
    print(json.dumps(trio.run(main, parser.parse_args().broker_superuser), indent=1))
