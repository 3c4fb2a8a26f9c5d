"""EC2 clusters (mixed into EC2Provider): every node in one RunInstances call (MinCount =
MaxCount, so EC2 launches all or none) into the cluster's placement group and its own security
group, with the type's EFA interfaces, then each host tagged with its node by launch index."""

from __future__ import annotations

from dataclasses import replace

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from instances.providers.base import (
    TAG_CLUSTER,
    TAG_DEPLOYMENT,
    TAG_INSTANCE,
    CloudHost,
    ClusterLaunch,
    LaunchRequest,
    ProviderPermanentError,
    ProviderTransientError,
    cluster_group_name,
    host_name,
    launch_tags,
)
from instances.providers.ec2_errors import translate


def cluster_tags(cluster_id: str) -> list[dict]:
    """The tags of a cluster's placement group and security group: which cluster, and which
    deployment (reconcile releases only its own)."""
    return [
        {"Key": TAG_CLUSTER, "Value": cluster_id},
        {"Key": TAG_DEPLOYMENT, "Value": settings.PORTAL_DEPLOYMENT},
    ]


def _mine() -> list[dict]:
    return [
        {"Name": "tag-key", "Values": [TAG_CLUSTER]},
        {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [settings.PORTAL_DEPLOYMENT]},
    ]


def efa_interfaces(count: int, subnet: str, groups: list[str]) -> list[dict]:
    """A cluster node's network interfaces as AWS recommends for EFA on hosts with several
    network cards: the primary an ENA interface (card 0, device 0), then one EFA-only interface
    per card (card 0 on device 1, every other card on device 0), ``count`` EFA in all."""
    common = {"SubnetId": subnet, "Groups": groups, "DeleteOnTermination": True}
    interfaces = [{"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "interface"}]
    interfaces += [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 1 if card == 0 else 0,
            "InterfaceType": "efa-only",
        }
        for card in range(count)
    ]
    return [interface | common for interface in interfaces]


class EC2Clusters:
    """Launching clusters, and a node alone into one, on EC2; uses EC2Provider's launch pieces
    (_launch_params, _run, _user_data, _host, _instances, _call, _launched_earlier)."""

    def launch_cluster(self, cluster: ClusterLaunch) -> list[CloudHost]:
        """One RunInstances call for every node (MinCount = MaxCount, so EC2 launches all or
        none) into the cluster's placement group and security group, with the type's EFA
        interfaces; then each host is tagged with its node, by launch index (rank)."""
        first = cluster.nodes[0]
        first = replace(first, tags=first.tags | {TAG_CLUSTER: cluster.cluster_id})
        self._placement_group(cluster)
        tags = {key: value for key, value in launch_tags(first).items() if key != TAG_INSTANCE}
        params = self._launch_params(
            first,
            user_data=self._user_data(
                first,
                nodes=tuple((node.instance_uuid, node.agent_token) for node in cluster.nodes),
            ),
            tags=tags,
            name=f"portal-cluster-{cluster.cluster_id[:8]}",
            token=cluster.client_token,
        )
        params["MinCount"] = params["MaxCount"] = len(cluster.nodes)
        items = self._run(
            params,
            first,
            place=self._in_cluster(first, params, cluster.efa_interfaces),
            earlier=lambda error: self._cluster_hosts(cluster, error),
        )
        if items and isinstance(items[0], CloudHost):
            return items
        return self._tag_nodes(cluster, [self._host(item) for item in items])

    def _join_cluster(self, request: LaunchRequest, params: dict) -> list:
        """One node launched alone into its running cluster (a replacement): the cluster's
        placement group, security group and EFA interfaces, in the subnet the others run in."""
        return self._run(
            params,
            request,
            place=self._in_cluster(request, params, request.efa_interfaces),
            earlier=lambda error: [self._launched_earlier(request, error)],
        )

    def _in_cluster(self, request: LaunchRequest, params: dict, efa: int):
        """Put ``params`` in the request's cluster (placement group, the cluster's security
        group beside the project's); the answer places them in a subnet, with ``efa`` EFA
        interfaces on their network cards when the type has them."""
        cluster_id = request.tags[TAG_CLUSTER]
        subnets = self._subnets_to_try(request)
        own = self._cluster_security_group(cluster_id, subnets[0] if subnets else "")
        groups = [*request.isolation.security_group_ids, own]
        params["Placement"] = params.get("Placement", {}) | {
            "GroupName": cluster_group_name(cluster_id)
        }
        if request.zone and not subnets:
            params["Placement"]["AvailabilityZone"] = request.zone  # the default VPC's
        params.pop("SecurityGroupIds", None)
        if not efa:
            params["SecurityGroupIds"] = groups
            return lambda subnet: {"SubnetId": subnet}
        if not subnets:
            raise ProviderPermanentError(
                "An EFA cluster needs a subnet: set the project's subnets or "
                "PORTAL_EC2_SUBNET_IDS.",
                code="MissingParameter",
            )
        return lambda subnet: {"NetworkInterfaces": efa_interfaces(efa, subnet, groups)}

    def _tag_nodes(self, cluster: ClusterLaunch, hosts: list[CloudHost]) -> list[CloudHost]:
        """Tag each host with its node (the one of its launch index): reconcile and
        find_tagged know a host by that tag. Repeating it changes nothing."""
        by_index = {host.launch_index: host for host in hosts}
        if sorted(by_index) != list(range(len(cluster.nodes))):
            raise ProviderTransientError(
                f"The cluster's launch answered {len(hosts)} of {len(cluster.nodes)} nodes.",
                code="IncompleteCluster",
            )
        tagged = []
        for rank, node in enumerate(cluster.nodes):
            host = by_index[rank]
            node_tags = {TAG_INSTANCE: node.instance_uuid, "Name": host_name(node.instance_uuid)}
            try:
                self._call(
                    "create_tags",
                    Resources=[host.cloud_id],
                    Tags=[{"Key": k, "Value": v} for k, v in node_tags.items()],
                )
            except ProviderPermanentError as error:
                if error.code != "InvalidInstanceID.NotFound":
                    raise
                # EC2's reads lag its launches: a host just made may not be taggable yet. The
                # retry's RunInstances (same ClientToken) answers the same hosts to tag.
                raise ProviderTransientError(str(error), code=error.code) from error
            tagged.append(replace(host, tags=host.tags | node_tags))
        return tagged

    def _cluster_hosts(self, cluster: ClusterLaunch, error: Exception) -> list[CloudHost]:
        """The hosts an earlier try of this cluster's launch made (its reply was lost)."""
        found = self._instances(
            [
                {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster.cluster_id]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        if len(found) != len(cluster.nodes):
            raise ProviderTransientError(str(error), code="IdempotentParameterMismatch")
        return self._tag_nodes(cluster, found)

    def _placement_group(self, cluster: ClusterLaunch) -> None:
        """The cluster's placement group ("cluster": its nodes on one low-latency network
        segment in one zone); one that exists already is the one a repeat made."""
        try:
            self.client.create_placement_group(
                GroupName=cluster.name,
                Strategy="cluster",
                TagSpecifications=[
                    {
                        "ResourceType": "placement-group",
                        "Tags": cluster_tags(cluster.cluster_id),
                    }
                ],
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "InvalidPlacementGroup.Duplicate":
                raise translate(error) from error
        except BotoCoreError as error:
            raise translate(error) from error

    def _cluster_security_group(self, cluster_id: str, subnet: str) -> str:
        """The cluster's own security group, open to all traffic between its members (NCCL and
        EFA use any port), in the subnet's VPC. Every node's task may run this at once, and a
        worker may die between creating it and opening it: found by name, made if missing,
        and its rule added every time (a rule that exists is fine)."""
        name = cluster_group_name(cluster_id)
        vpc = self._vpcs.get(subnet, "") if subnet else ""
        filters = [{"Name": "group-name", "Values": [name]}]
        if vpc:
            filters.append({"Name": "vpc-id", "Values": [vpc]})
        found = self._call("describe_security_groups", Filters=filters)["SecurityGroups"]
        if found:
            group = found[0]["GroupId"]
        else:
            create = {
                "GroupName": name,
                "Description": f"GPU portal cluster {cluster_id}: all traffic between nodes",
                "TagSpecifications": [
                    {"ResourceType": "security-group", "Tags": cluster_tags(cluster_id)}
                ],
            }
            if vpc:
                create["VpcId"] = vpc
            try:
                group = self._call("create_security_group", **create)["GroupId"]
            except ProviderPermanentError as error:
                if error.code != "InvalidGroup.Duplicate":
                    raise
                # Another worker made it a moment ago.
                found = self._call("describe_security_groups", Filters=filters)["SecurityGroups"]
                group = found[0]["GroupId"]
        try:
            self._call(
                "authorize_security_group_ingress",
                GroupId=group,
                IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}],
            )
        except ProviderPermanentError as error:
            if error.code != "InvalidPermission.Duplicate":
                raise
        return group

    def cluster_leftovers(self) -> set[str]:
        """The clusters (ids) of this deployment that still have a placement group or a
        security group in the cloud."""
        groups = self._call("describe_placement_groups", Filters=_mine())["PlacementGroups"]
        pages = self.client.get_paginator("describe_security_groups").paginate(Filters=_mine())
        try:
            firewalls = [group for page in pages for group in page["SecurityGroups"]]
        except (ClientError, BotoCoreError) as error:
            raise translate(error) from error
        return {
            tag["Value"]
            for group in [*groups, *firewalls]
            for tag in group.get("Tags", [])
            if tag["Key"] == TAG_CLUSTER
        }

    def release_cluster(self, cluster_id: str) -> bool:
        """Delete the cluster's security group, then its placement group; False while EC2
        still holds them for a node that is shutting down (the next pass tries again)."""
        name = cluster_group_name(cluster_id)
        found = self._call(
            "describe_security_groups",
            Filters=[{"Name": "group-name", "Values": [name]}, *_mine()[1:]],
        )["SecurityGroups"]
        steps = [("delete_security_group", {"GroupId": group["GroupId"]}) for group in found] + [
            ("delete_placement_group", {"GroupName": name})
        ]
        for operation, params in steps:
            try:
                getattr(self.client, operation)(**params)
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code in ("DependencyViolation", "InvalidPlacementGroup.InUse"):
                    return False
                if code not in ("InvalidGroup.NotFound", "InvalidPlacementGroup.Unknown"):
                    raise translate(error) from error
            except BotoCoreError as error:
                raise translate(error) from error
        return True
