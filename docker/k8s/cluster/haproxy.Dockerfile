# HAProxy 2.6 from Debian 12 (built with Lua), in place of Docker Hub's
# haproxy:2.6 that docker/k8s/proxy.yaml names, for a cluster with no
# registry: docker/k8s/cluster/images.sh builds it as docker.io/library/haproxy:2.6.
# It behaves as that image does where proxy.yaml relies on it: the
# configuration in /usr/local/etc/haproxy, arguments beginning with an option
# go to `haproxy -W -db`, and it runs as user haproxy, uid and gid 99 (the
# Deployment's runAsUser: 99).
#
#   buildah bud --build-arg BASE=localhost/debian:bookworm \
#     -f docker/k8s/cluster/haproxy.Dockerfile -t haproxy:2.6 docker/k8s/cluster
ARG BASE=debian:bookworm-slim
FROM ${BASE}
# The package makes its user haproxy with the next free system uid; the
# official image's is 99, as is the Deployment's, so it is renumbered.
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends haproxy \
 && rm -rf /var/lib/apt/lists/* \
 && groupmod -g 99 haproxy && usermod -u 99 -g 99 haproxy \
 && mkdir -p /usr/local/etc/haproxy /var/lib/haproxy \
 && chown -R haproxy:haproxy /var/lib/haproxy \
 && haproxy -vv | grep -q 'Built with Lua'
COPY haproxy-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
# SIGUSR1: the master stops its worker softly, letting connections finish.
STOPSIGNAL SIGUSR1
USER haproxy
WORKDIR /var/lib/haproxy
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
