#!/usr/bin/python3
"""Offline schema check of rendered Kubernetes manifests.

Checks every document of each FILE against the API models of Debian's
python3-kubernetes (22.6: the Kubernetes 1.22 API, generated from its OpenAPI
specification): its apiVersion and kind are known; every key is a field of
its model (a misspelt or misplaced field is an error, where a cluster would
drop or refuse it); every value has its field's type (a number where a string
belongs, a map where a list belongs); every required field is present and
every enumerated one holds an allowed value (the models' own client-side
validation). No cluster is needed. Exit 0 when every document passes, 1 with
the errors, 77 (skipped) without python3-kubernetes.

Usage: k8s_schema.py FILE...
"""
import sys

import yaml

try:
    import kubernetes.client as k8s
except ImportError:
    print("SKIP: python3-kubernetes is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

KINDS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("v1", "Pod"): "V1Pod",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
}
CONFIG = k8s.Configuration()
CONFIG.client_side_validation = True


def check_primitive(value, typ):
    """Whether `value` (as YAML loaded it) is of OpenAPI primitive `typ`."""
    if typ == "str" or typ == "datetime":
        return isinstance(value, str)
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "bool":
        return isinstance(value, bool)
    if typ == "object":  # IntOrString and quantities
        return isinstance(value, (str, int)) and not isinstance(value, bool)
    return None  # not a primitive


def check_model(value, cls_name, path, errors):
    cls = getattr(k8s, cls_name)
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a map ({cls_name})")
        return
    field = {json: attr for attr, json in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in field:
            errors.append(f"{path}.{key}: {cls_name} has no such field")
            continue
        check(v, cls.openapi_types[field[key]], f"{path}.{key}", errors)
    # The model's setters reject a missing required field and a value outside
    # an enumeration.
    model = object.__new__(cls)
    model.local_vars_configuration = CONFIG
    for attr, json in cls.attribute_map.items():
        v = value.get(json)
        try:
            setattr(model, attr, v)
        except ValueError as e:
            errors.append(f"{path}: {e}")


def check(value, typ, path, errors):
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, v in enumerate(value):
            check(v, typ[5:-1], f"{path}[{i}]", errors)
    elif typ.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        inner = typ[typ.index(",") + 1 : -1].strip()
        for k, v in value.items():
            if not isinstance(k, str):
                errors.append(f"{path}: key {k!r} is not a string")
            check(v, inner, f"{path}.{k}", errors)
    else:
        ok = check_primitive(value, typ)
        if ok is None:
            check_model(value, typ, path, errors)
        elif not ok:
            errors.append(f"{path}: {value!r} is not of type {typ}")


def main(files):
    errors, count = [], 0
    for name in files:
        with open(name) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is None:
                    continue
                count += 1
                kind = (doc.get("apiVersion"), doc.get("kind"))
                where = f"{name} document {i} ({kind[1]} {doc.get('metadata', {}).get('name')})"
                if kind not in KINDS:
                    errors.append(f"{where}: unknown apiVersion/kind {kind}")
                    continue
                check_model(doc, KINDS[kind], where, errors)
    for e in errors:
        print(e)
    version = __import__("kubernetes").__version__
    print(f"{count} documents in {len(files)} file(s), {len(errors)} error(s) against the Kubernetes API "
          f"models of python3-kubernetes {version}")
    return 1 if errors or count == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
