/* topo_hw.c - the machine as hwloc sees it (packages, cores, caches, NUMA nodes, PCI devices
 * and which CPUs each device is near), and the GPUs as the NVIDIA driver sees them (NVML and
 * the CUDA driver API, both through dlopen). Everything here answers "not available, because
 * ..." on a machine without the library instead of failing. */
#include "topo_hw.h"
#include "../common/common.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_HWLOC
#include "hwloc_lib.h"              /* before the library's header: loaded with dlopen */
#include <hwloc.h>
#endif


const char *topo_pci_class_name(unsigned class_id)
{
    static const struct { unsigned id; const char *name; } exact[] = {
        {0x0100, "SCSI controller"}, {0x0101, "IDE controller"}, {0x0106, "SATA controller"},
        {0x0108, "NVMe controller"}, {0x0200, "Ethernet controller"},
        {0x0207, "InfiniBand controller"}, {0x0300, "VGA controller"},
        {0x0302, "3D controller (GPU)"}, {0x0600, "Host bridge"}, {0x0601, "ISA bridge"},
        {0x0604, "PCI bridge"}, {0x0680, "Bridge"}, {0x0c03, "USB controller"},
        {0x0c05, "SMBus controller"}, {0x1200, "Processing accelerator"},
        {0xffff, "Unassigned class"},
    };
    static const char *const base[] = {
        "Unclassified device", "Mass storage controller", "Network controller",
        "Display controller", "Multimedia controller", "Memory controller", "Bridge",
        "Communication controller", "System peripheral", "Input device", "Docking station",
        "Processor", "Serial bus controller", "Wireless controller", "Intelligent controller",
        "Satellite controller", "Encryption controller", "Signal processing controller",
        "Processing accelerator",
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (exact[i].id == class_id)
            return exact[i].name;
    unsigned b = class_id >> 8;
    return b < sizeof base / sizeof base[0] ? base[b] : "Other device";
}

#ifdef HAVE_HWLOC
static void add_cache(topo_machine *m, hwloc_obj_t o)
{
    const struct hwloc_cache_attr_s *ca = &o->attr->cache;
    char kind = ca->type == HWLOC_OBJ_CACHE_INSTRUCTION ? 'i'
                : ca->type == HWLOC_OBJ_CACHE_DATA ? 'd' : 'u';
    int pus = o->cpuset ? hwloc_bitmap_weight(o->cpuset) : 0;
    for (int i = 0; i < m->ncaches; i++) {
        topo_cache *c = &m->caches[i];
        if (c->level == (int)ca->depth && c->kind == kind && c->size == ca->size) {
            c->count++;
            return;
        }
    }
    if (m->ncaches >= TOPO_HW_MAX_CACHES)
        return;
    topo_cache *c = &m->caches[m->ncaches++];
    c->level = (int)ca->depth;
    c->kind = kind;
    c->size = ca->size;
    c->line = ca->linesize;
    c->count = 1;
    c->pus_per_cache = pus;
}

static void info_copy(char *dst, size_t n, hwloc_obj_t o, const char *key)
{
    const char *v = hwloc_obj_get_info_by_name(o, key);
    snprintf(dst, n, "%s", v ? v : "");
}

/* The machine, loaded once and kept for the life of the process: the topology does not
 * change while the lab runs, and keeping it also keeps hwloc's pci plugin (libpciaccess)
 * loaded, whose buffers would otherwise show up as leaks under LeakSanitizer. */
static hwloc_topology_t machine_topology(char *err, size_t n)
{
    static hwloc_topology_t topo;
    static int loaded;
    if (loaded)
        return topo;
    hwloc_topology_t t;
    if (hwloc_lib_why()) {
        snprintf(err, n, "%s", hwloc_lib_why());
        return NULL;
    }
    if (hwloc_topology_init(&t) != 0) {
        snprintf(err, n, "hwloc_topology_init failed");
        return NULL;
    }
    /* the whole machine, not only the CPUs our cgroup allows; every PCI device; the
     * instruction caches too (hwloc drops them by default) */
    hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_icache_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_load(t) != 0) {
        snprintf(err, n, "hwloc_topology_load failed");
        hwloc_topology_destroy(t);
        return NULL;
    }
    topo = t;
    loaded = 1;
    return topo;
}

int topo_machine_read(topo_machine *m, char *err, size_t n)
{
    static const hwloc_obj_type_t cache_types[] = {
        HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L2ICACHE,
        HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L3ICACHE, HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L5CACHE,
    };
    memset(m, 0, sizeof *m);
    unsigned v = hwloc_get_api_version();   /* the API level, not the release number */
    snprintf(m->hwloc_version, sizeof m->hwloc_version, "%u.%u", v >> 16, (v >> 8) & 0xff);
    hwloc_topology_t t = machine_topology(err, n);
    if (!t)
        return -1;
    m->packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    m->cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    m->pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    m->numa_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    if (pkg)
        info_copy(m->cpu_model, sizeof m->cpu_model, pkg, "CPUModel");
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (bound && hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_PROCESS) == 0)
        m->pus_allowed = hwloc_bitmap_weight(bound);
    else
        m->pus_allowed = m->pus;
    hwloc_bitmap_free(bound);

    for (size_t k = 0; k < sizeof cache_types / sizeof cache_types[0]; k++) {
        int cnt = hwloc_get_nbobjs_by_type(t, cache_types[k]);
        for (int i = 0; i < cnt; i++)
            add_cache(m, hwloc_get_obj_by_type(t, cache_types[k], (unsigned)i));
    }
    for (int i = 0; i < m->numa_nodes && m->nnuma < TOPO_HW_MAX_NUMA; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
        topo_numa *z = &m->numa[m->nnuma++];
        z->os_index = o->os_index;
        z->local_memory = o->attr ? o->attr->numanode.local_memory : 0;
        if (o->cpuset)
            hwloc_bitmap_list_snprintf(z->cpus, sizeof z->cpus, o->cpuset);
    }
    for (hwloc_obj_t o = hwloc_get_next_pcidev(t, NULL); o; o = hwloc_get_next_pcidev(t, o)) {
        m->npci_total++;
        if (m->npci >= TOPO_HW_MAX_PCI)
            continue;
        topo_pci *p = &m->pci[m->npci++];
        const struct hwloc_pcidev_attr_s *pa = &o->attr->pcidev;
        p->domain = pa->domain;
        p->bus = pa->bus;
        p->dev = pa->dev;
        p->func = pa->func;
        p->class_id = pa->class_id;
        p->vendor_id = pa->vendor_id;
        p->device_id = pa->device_id;
        p->linkspeed = pa->linkspeed;
        info_copy(p->vendor, sizeof p->vendor, o, "PCIVendor");
        info_copy(p->name, sizeof p->name, o, "PCIDevice");
        if (!p->name[0] && o->name)
            snprintf(p->name, sizeof p->name, "%s", o->name);
        size_t used = 0;
        for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
            if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
                continue;
            int w = snprintf(p->osdevs + used, sizeof p->osdevs - used, "%s%s", used ? "," : "",
                             c->name);
            if (w < 0 || (size_t)w >= sizeof p->osdevs - used)
                break;
            used += (size_t)w;
        }
        hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(t, o);
        if (near && near->cpuset)
            hwloc_bitmap_list_snprintf(p->near_cpus, sizeof p->near_cpus, near->cpuset);
    }
    return 0;
}
#else
int topo_machine_read(topo_machine *m, char *err, size_t n)
{
    memset(m, 0, sizeof *m);
    snprintf(err, n, "mlsys-lab was built without hwloc (libhwloc-dev was not found when it was "
             "compiled: apt-get install libhwloc-dev, then rebuild)");
    return -1;
}
#endif

/* "512 KiB", "8 MiB", "4.7 GiB": one decimal unless the value is whole. */
static void format_bytes(uint64_t b, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (v == (double)(uint64_t)v)
        snprintf(buf, n, "%.0f %s", v, units[u]);
    else
        snprintf(buf, n, "%.1f %s", v, units[u]);
}

void topo_machine_print(FILE *out, const topo_machine *m)
{
    char sz[32];
    fprintf(out, "hwloc (API %s): what the operating system knows about this machine\n",
            m->hwloc_version);
    fprintf(out, "  Packages (sockets)  %3d   %s\n", m->packages, m->cpu_model);
    fprintf(out, "  Cores               %3d\n", m->cores);
    fprintf(out, "  Hardware threads    %3d   (%d per core; this process may use %d)\n", m->pus,
            m->cores ? m->pus / m->cores : 0, m->pus_allowed);
    fprintf(out, "  NUMA nodes          %3d\n", m->numa_nodes);
    for (int i = 0; i < m->nnuma; i++) {
        format_bytes(m->numa[i].local_memory, sz, sizeof sz);
        fprintf(out, "    node %-3u  %10s local memory, CPUs %s\n", m->numa[i].os_index, sz,
                m->numa[i].cpus);
    }
    fprintf(out, "  Caches\n");
    for (int i = 0; i < m->ncaches; i++) {
        const topo_cache *c = &m->caches[i];
        format_bytes(c->size, sz, sizeof sz);
        fprintf(out, "    L%d%-2s %10s  x%-3d line %u B, shared by %d thread%s\n", c->level,
                c->kind == 'd' ? "d" : c->kind == 'i' ? "i" : "", sz, c->count, c->line,
                c->pus_per_cache, c->pus_per_cache == 1 ? "" : "s");
    }
    if (m->ncaches == 0)
        fprintf(out, "    (hwloc reports no cache on this machine)\n");
    fprintf(out, "  PCI devices         %3d\n", m->npci_total);
    for (int i = 0; i < m->npci; i++) {
        const topo_pci *p = &m->pci[i];
        char what[200];
        if (p->vendor[0] || p->name[0])
            snprintf(what, sizeof what, "%s%s%s", p->vendor, p->vendor[0] ? " " : "", p->name);
        else
            snprintf(what, sizeof what, "(hwloc has no PCI name database here)");
        fprintf(out, "    %04x:%02x:%02x.%x  %04x:%04x  class %04x %-24s %s", p->domain, p->bus,
                p->dev, p->func, p->vendor_id, p->device_id, p->class_id,
                topo_pci_class_name(p->class_id), what);
        if (p->osdevs[0])
            fprintf(out, "  [%s]", p->osdevs);
        if (p->linkspeed > 0)
            fprintf(out, "  %.1f GB/s", (double)p->linkspeed);
        if (p->near_cpus[0])
            fprintf(out, "  near CPUs %s", p->near_cpus);
        fputc('\n', out);
    }
    if (m->npci < m->npci_total)
        fprintf(out, "    ... and %d more\n", m->npci_total - m->npci);
}

/* ---- NVML, by hand: a handful of entry points with the types they need ---- */

typedef int nvml_ret;
typedef void *nvml_dev;
typedef struct nvml_memory { unsigned long long total, free, used; } nvml_memory;
typedef struct nvml_pci {            /* nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it */
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci;

enum { NVML_LEVEL_INTERNAL = 0, NVML_LEVEL_SINGLE = 10, NVML_LEVEL_MULTIPLE = 20,
       NVML_LEVEL_HOSTBRIDGE = 30, NVML_LEVEL_NODE = 40, NVML_LEVEL_SYSTEM = 50 };
#define NVML_MAX_LINKS 18
#define NVML_MAX_GPUS 64

static const char *nvml_level_code(int level)
{
    switch (level) {
    case NVML_LEVEL_INTERNAL: return "BRD";    /* two GPUs on one board */
    case NVML_LEVEL_SINGLE: return "PIX";
    case NVML_LEVEL_MULTIPLE: return "PXB";
    case NVML_LEVEL_HOSTBRIDGE: return "PHB";
    case NVML_LEVEL_NODE: return "NODE";
    case NVML_LEVEL_SYSTEM: return "SYS";
    default: return "?";
    }
}

int topo_nvml_print(FILE *out)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(out, "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine), so "
                "no driver view of the GPUs\n");
        return 0;
    }
    nvml_ret (*init)(void) = (nvml_ret (*)(void))dlsym(h, "nvmlInit_v2");
    nvml_ret (*shutdown)(void) = (nvml_ret (*)(void))dlsym(h, "nvmlShutdown");
    const char *(*errstr)(nvml_ret) = (const char *(*)(nvml_ret))dlsym(h, "nvmlErrorString");
    nvml_ret (*drv)(char *, unsigned) =
        (nvml_ret (*)(char *, unsigned))dlsym(h, "nvmlSystemGetDriverVersion");
    nvml_ret (*count)(unsigned *) = (nvml_ret (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
    nvml_ret (*handle)(unsigned, nvml_dev *) =
        (nvml_ret (*)(unsigned, nvml_dev *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvml_ret (*name)(nvml_dev, char *, unsigned) =
        (nvml_ret (*)(nvml_dev, char *, unsigned))dlsym(h, "nvmlDeviceGetName");
    nvml_ret (*mem)(nvml_dev, nvml_memory *) =
        (nvml_ret (*)(nvml_dev, nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    nvml_ret (*pci)(nvml_dev, nvml_pci *) =
        (nvml_ret (*)(nvml_dev, nvml_pci *))dlsym(h, "nvmlDeviceGetPciInfo_v3");
    nvml_ret (*ancestor)(nvml_dev, nvml_dev, int *) =
        (nvml_ret (*)(nvml_dev, nvml_dev, int *))dlsym(h, "nvmlDeviceGetTopologyCommonAncestor");
    nvml_ret (*link_state)(nvml_dev, unsigned, int *) =
        (nvml_ret (*)(nvml_dev, unsigned, int *))dlsym(h, "nvmlDeviceGetNvLinkState");
    int ngpu = 0;
    if (!init || !shutdown || !count || !handle) {
        fprintf(out, "NVML: libnvidia-ml.so.1 lacks the entry points we need\n");
        goto out;
    }
    nvml_ret rc = init();
    if (rc != 0) {
        fprintf(out, "NVML: nvmlInit failed: %s\n", errstr ? errstr(rc) : "error");
        goto out;
    }
    char ver[96] = "?";
    if (drv)
        drv(ver, sizeof ver);
    unsigned n = 0;
    if (count(&n) != 0)
        n = 0;
    if (n > NVML_MAX_GPUS)
        n = NVML_MAX_GPUS;
    ngpu = (int)n;
    fprintf(out, "NVML: driver %s, %u GPU%s\n", ver, n, n == 1 ? "" : "s");
    nvml_dev devs[NVML_MAX_GPUS];
    for (unsigned i = 0; i < n; i++) {
        char nm[96] = "?";
        nvml_memory mi = {0, 0, 0};
        nvml_pci pi;
        memset(&pi, 0, sizeof pi);
        devs[i] = NULL;
        if (handle(i, &devs[i]) != 0)
            continue;
        if (name)
            name(devs[i], nm, sizeof nm);
        if (mem)
            mem(devs[i], &mi);
        if (pci)
            pci(devs[i], &pi);
        int links = 0;
        for (unsigned l = 0; link_state && l < NVML_MAX_LINKS; l++) {
            int st = 0;
            if (link_state(devs[i], l, &st) == 0 && st == 1)
                links++;
        }
        fprintf(out, "  GPU%u  %-28s %6llu MiB  bus %s  %d active NVLink%s\n", i, nm,
                mi.total / (1024ull * 1024ull), pi.bus_id[0] ? pi.bus_id : "?", links,
                links == 1 ? "" : "s");
    }
    if (n > 1 && ancestor) {
        fprintf(out, "  PCIe common ancestor per pair (NVML; NVLink is not shown here):\n      ");
        for (unsigned c = 0; c < n; c++)
            fprintf(out, " GPU%-3u", c);
        fputc('\n', out);
        for (unsigned r = 0; r < n; r++) {
            fprintf(out, "  GPU%-3u", r);
            for (unsigned c = 0; c < n; c++) {
                int level = -1;
                if (r != c && devs[r] && devs[c] && ancestor(devs[r], devs[c], &level) != 0)
                    level = -1;
                fprintf(out, " %-6s", r == c ? "X" : nvml_level_code(level));
            }
            fputc('\n', out);
        }
    }
    shutdown();
out:
    dlclose(h);
    return ngpu;
}

/* ---- CUDA: versions through probe.c, per-GPU attributes through the driver API ---- */

enum { CU_ATTR_SM_COUNT = 16, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

static void version_text(int v, char *buf, size_t n)
{
    if (v > 0)
        snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
    else
        snprintf(buf, n, "not found");
}

int topo_cuda_print(FILE *out)
{
    int rt = 0, dv = 0, nccl = 0;
    char a[32], b[32], why[256], nwhy[256];
    probe_cuda_versions(&rt, &dv);
    version_text(rt, a, sizeof a);
    version_text(dv, b, sizeof b);
    fprintf(out, "CUDA runtime: %s   driver: %s\n", a, b);
    long cudnn = probe_cudnn_version();
    if (cudnn >= 90000)       /* 9.x: major*10000 + minor*100 + patch */
        fprintf(out, "cuDNN: %ld.%ld.%ld\n", cudnn / 10000, (cudnn / 100) % 100, cudnn % 100);
    else if (cudnn > 0)       /* 8.x and older: major*1000 + minor*100 + patch */
        fprintf(out, "cuDNN: %ld.%ld.%ld\n", cudnn / 1000, (cudnn / 100) % 10, cudnn % 100);
    else
        fprintf(out, "cuDNN: not found\n");
    if (probe_nccl(&nccl, nwhy, sizeof nwhy))
        fprintf(out, "NCCL: %d.%d.%d\n", nccl / 10000, (nccl / 100) % 100, nccl % 100);
    else
        fprintf(out, "NCCL: %s\n", nwhy);
    int n = probe_gpu_count(why, sizeof why);
    fprintf(out, "GPUs: %d (%s)\n", n, why);
    if (n <= 0)
        return 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*cu_init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
    int (*get)(int *, int) = h ? (int (*)(int *, int))dlsym(h, "cuDeviceGet") : NULL;
    int (*attr)(int *, int, int) = h ? (int (*)(int *, int, int))dlsym(h, "cuDeviceGetAttribute")
                                     : NULL;
    for (int i = 0; i < n; i++) {
        char nm[128] = "?";
        double gib = 0;
        int dev = 0, major = 0, minor = 0, sms = 0;
        probe_gpu_info(i, nm, sizeof nm, &gib);
        if (cu_init && get && attr && cu_init(0) == 0 && get(&dev, i) == 0) {
            attr(&major, CU_ATTR_CC_MAJOR, dev);
            attr(&minor, CU_ATTR_CC_MINOR, dev);
            attr(&sms, CU_ATTR_SM_COUNT, dev);
        }
        double gb = gib * 1024.0 * 1024.0 * 1024.0 / 1e9;
        fprintf(out, "  GPU %d: %s\n", i, nm);
        fprintf(out, "    compute capability %d.%d, memory %.1f GB, %d SMs\n", major, minor, gb,
                sms);
    }
    if (h)
        dlclose(h);
    return n;
}
