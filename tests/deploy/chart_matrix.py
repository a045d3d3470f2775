"""The chart's values matrix: each name a set of ``helm template --set`` values that the
chart tests render (test_chart.py) and the live Helm tests install (test_helm_live.py)."""

from __future__ import annotations

from typing import Any

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ==\n-----END CERTIFICATE-----\n"


MATRIX: dict[str, dict[str, Any]] = {
    "default": {},
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "existing-secret": {"certificates": {"mode": "existing-secret", "caBundle": CA_PEM}},
    "precreated-secret": {"certificates": {"precreateSecret": True}},
    "default-nodeipam": {"settings": {"default-lb-service-ipam": "nodeipam"}},
    "no-webhook": {"settings": {"webhook": False}},
    "network-policy": {
        "networkPolicy": {
            "enabled": True,
            "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        }
    },
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    "monitoring": {
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Network"}},
    },
    "replicas-1": {"replicas": 1, "podDisruptionBudget": {"enabled": False}},
    "replicas-3": {"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}},
    "custom-image": {
        "image": {"repository": "registry.example.org/node-ipam-lb", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "image-digest": {"image": {"digest": "sha256:" + "ab" * 32}},
    "scheduling": {
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.org/team": "network"},
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
    },
    "every-setting": {
        "settings": {
            "enable-node-ipam": True,
            "load-balancer-class": "example.org/lb",
            "per-node-address-fallback": True,
            "exclude-not-ready-nodes": True,
            "not-ready-grace-seconds": 0.5,
            "ip-mode": "Proxy",
            "reserved-node-ports": "22,6443/TCP,10250-10259",
            "reserved-port-exceptions": "kube-system/bastion:22;infra/dns:53/UDP+53/TCP",
            "allowed-namespaces": "default,team-a",
            "bind-address": "::",
            "port": 8443,
            "health-probe-bind-address": "[::]:8082",
            "workers": 8,
            "inflight-body-bytes": 16777216,
            "auth": "kubernetes",
            "log-level": "debug",
            "lease-duration-seconds": 30,
            "renew-deadline-seconds": 20,
            "retry-period-seconds": 4,
        }
    },
}
"""The render matrix: each certificate mode, default-nodeipam, networkPolicy and
serviceMonitor on, 1 and 3 replicas, a custom image, scheduling, many settings."""
