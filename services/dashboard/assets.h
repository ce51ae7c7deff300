// The dashboard's pages (services/dashboard/web/: HTML, JavaScript, CSS), compiled into the
// binary at build time (embed_assets.cmake), so that the coordinator serves them with no
// file to deploy and no CDN: the pages work offline.
#ifndef LOCKSTEP_SERVICES_DASHBOARD_ASSETS_H_
#define LOCKSTEP_SERVICES_DASHBOARD_ASSETS_H_

#include <string_view>

namespace lockstep {

struct Asset {
  std::string_view path;          // "/index.html", "/app.js", ...
  std::string_view content_type;  // with charset
  std::string_view body;
};

// The asset served at `path` ("/" is /index.html); nullptr when there is none.
const Asset* FindAsset(std::string_view path);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_DASHBOARD_ASSETS_H_
